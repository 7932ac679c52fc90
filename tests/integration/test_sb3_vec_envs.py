"""Stable-Baselines3's own ``tests/test_vec_envs.py`` against ``portal_shm.sb3.SubprocVecEnv``.

Nothing of SB3 is copied here: the module (and SB3's pytest settings, its ``pyproject.toml``) is
taken at test time from the sdist of the installed version, downloaded with pip (pip's cache
answers repeat runs offline), or from ``PORTAL_SHM_SB3_SOURCE`` (an SB3 checkout or sdist at that
version). It runs twice, side by side, each in a pytest subprocess: once with SB3's own ``SubprocVecEnv`` (the
reference), once with ``stable_baselines3.common.vec_env.SubprocVecEnv`` replaced by the drop-in
before the module imports it. A conftest written beside the extracted module does the swap and
records which tests built a ``SubprocVecEnv``. Every test that passes with SB3's class must pass
with the drop-in.

Measured with stable-baselines3 2.9.2 (about 2 min per run on the 2-core VM): 16 of SB3's 36
tests build a ``SubprocVecEnv`` (``test_vecenv_custom_calls`` and ``test_vecenv_terminal_obs``
under each of SB3's 3 VecEnv wrappers, ``test_vecenv_single_space`` for 4 spaces, the Dict and
Tuple space tests, ``test_subproc_start_method``, ``test_vec_env_is_wrapped``,
``test_vec_deterministic``, ``test_vec_seeding``), and all 16 pass with either class; the whole
module passes 33 and skips 3 with either (SB3's own skips: ``test_render`` twice without an X
server, ``test_video_recorder`` without moviepy).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
import xml.etree.ElementTree as ET
from importlib import metadata
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # SB3's whole vec-env suite, twice, in one test: minutes

pytest.importorskip("stable_baselines3")
pytest.importorskip("torch")

MODULE = "tests/test_vec_envs.py"

# Written beside the extracted module: pytest loads it before the module, so the module's
# `from stable_baselines3.common.vec_env import SubprocVecEnv` gets the class chosen here.
SHIM = '''
import json, os

import stable_baselines3.common.vec_env as vec_env

if os.environ["PORTAL_SHM_SB3_CLASS"] == "drop-in":
    from portal_shm.sb3 import SubprocVecEnv as _Chosen
else:
    _Chosen = vec_env.SubprocVecEnv


class SubprocVecEnv(_Chosen):
    """The chosen class, noting which test built it (pytest names the running test)."""

    def __init__(self, *args, **kwargs):
        test = os.environ.get("PYTEST_CURRENT_TEST", "").rsplit(" (", 1)[0]
        with open(os.environ["PORTAL_SHM_SB3_BUILT"], "a") as log:
            log.write(json.dumps([test, _Chosen.__module__]) + "\\n")
        super().__init__(*args, **kwargs)


vec_env.SubprocVecEnv = SubprocVecEnv
'''


def _sb3_version() -> str:
    return metadata.version("stable-baselines3")


def _from_sdist(sdist: Path, destination: Path) -> Path:
    """SB3's test module and pytest settings from an sdist, under ``destination``."""
    with tarfile.open(sdist) as archive:
        names = {Path(*Path(name).parts[1:]).as_posix(): name for name in archive.getnames()}
        if MODULE not in names:
            pytest.skip(f"{sdist.name} has no {MODULE}: set PORTAL_SHM_SB3_SOURCE to an SB3 checkout at this version")
        for wanted in (MODULE, "pyproject.toml"):
            member = archive.getmember(names[wanted])
            target = destination / wanted
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(archive.extractfile(member).read())
    return destination


@pytest.fixture(scope="module")
def sb3_tests(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory holding SB3's ``tests/test_vec_envs.py`` and ``pyproject.toml`` of the installed version."""
    version = _sb3_version()
    root = tmp_path_factory.mktemp(f"sb3-{version}")
    source = os.environ.get("PORTAL_SHM_SB3_SOURCE")
    if source:
        path = Path(source)
        if path.is_file():
            return _from_sdist(path, root)
        for wanted in (MODULE, "pyproject.toml"):
            (root / wanted).parent.mkdir(parents=True, exist_ok=True)
            (root / wanted).write_bytes((path / wanted).read_bytes())
        return root
    download = root / "sdist"
    result = subprocess.run(
        [sys.executable, "-m", "pip", "download", f"stable-baselines3=={version}", "--no-deps",
         "--no-binary", ":all:", "--no-build-isolation", "-d", str(download)],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    sdists = sorted(download.glob("*.tar.gz"))
    if result.returncode != 0 or not sdists:
        pytest.skip(
            f"could not download the sdist of stable-baselines3=={version} (pip: "
            f"{result.stderr.strip().splitlines()[-1:] or result.returncode}); offline, set "
            "PORTAL_SHM_SB3_SOURCE to an SB3 checkout or sdist at this version"
        )
    return _from_sdist(sdists[0], root / "src")


def _start(directory: Path, chosen: str) -> subprocess.Popen:
    """SB3's module in a pytest subprocess with the chosen class (SB3's, or the drop-in)."""
    (directory / f"{chosen}.built").write_text("")
    (directory / "tests" / "conftest.py").write_text(SHIM)
    env = dict(os.environ, PORTAL_SHM_SB3_CLASS=chosen, PORTAL_SHM_SB3_BUILT=str(directory / f"{chosen}.built"))
    env.pop("PYTEST_ADDOPTS", None)
    return subprocess.Popen(
        [sys.executable, "-m", "pytest", MODULE, "-q", "-p", "no:cacheprovider",
         f"--junitxml={directory / f'{chosen}.xml'}", "-o", "timeout=300"],
        cwd=directory, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip


def _collect(directory: Path, chosen: str, process: subprocess.Popen) -> tuple[dict, set]:
    """Outcome per test id ('passed', 'failed', 'skipped'), and the tests that built a SubprocVecEnv
    (checked to be the chosen class: SB3's, or the drop-in)."""
    report, built = directory / f"{chosen}.xml", directory / f"{chosen}.built"
    try:
        output, _ = process.communicate(timeout=1800)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    if not report.exists():
        raise AssertionError(f"SB3's tests did not run ({chosen}):\n{output[-6000:]}")
    outcomes = {}
    for case in ET.parse(report).iter("testcase"):
        name = f"{case.get('classname', '').rsplit('.', 1)[-1]}::{case.get('name')}"
        kinds = {child.tag for child in case}
        outcomes[name] = "failed" if kinds & {"failure", "error"} else "skipped" if "skipped" in kinds else "passed"
    records = [json.loads(line) for line in built.read_text().splitlines() if line.strip()]
    module = "portal_shm.sb3" if chosen == "drop-in" else "stable_baselines3.common.vec_env.subproc_vec_env"
    assert {built_from for _, built_from in records} <= {module}, f"{chosen}: SubprocVecEnv came from {records}"
    tests = {test.rsplit("::", 1)[-1] for test, _ in records}
    return outcomes, {name for name in outcomes if name.split("::", 1)[1] in tests}


@pytest.mark.timeout(1800)  # SB3's module twice, side by side: ~2 min here, more on a loaded machine
def test_sb3s_vec_env_tests_pass_with_the_drop_in_as_with_sb3s_subproc_vec_env(sb3_tests: Path) -> None:
    # Both runs at once: they share no file but the shim, and most of each is waiting on
    # subprocesses, so together they take little more than one.
    runs = {chosen: _start(sb3_tests, chosen) for chosen in ("sb3", "drop-in")}
    try:
        reference, reference_built = _collect(sb3_tests, "sb3", runs["sb3"])
        drop_in, drop_in_built = _collect(sb3_tests, "drop-in", runs["drop-in"])
    finally:
        for process in runs.values():
            if process.poll() is None:
                process.kill()
                process.wait()

    def count(outcomes: dict, names: set) -> dict:
        return {kind: sum(outcomes[name] == kind for name in names) for kind in ("passed", "failed", "skipped")}

    summary = (
        f"stable-baselines3 {_sb3_version()} tests/test_vec_envs.py, tests that build a SubprocVecEnv: "
        f"SB3's {count(reference, reference_built)}, drop-in {count(drop_in, drop_in_built)}; "
        f"whole module: SB3's {count(reference, set(reference))}, drop-in {count(drop_in, set(drop_in))}"
    )
    print(summary)
    assert reference_built, "no test built a SubprocVecEnv: the swap did not take (see SHIM)"
    assert drop_in_built == reference_built, summary
    lost = sorted(name for name, outcome in reference.items() if outcome == "passed" and drop_in.get(name) != "passed")
    assert not lost, f"passed with SB3's SubprocVecEnv, not with the drop-in: {lost}\n{summary}"
    assert set(drop_in) == set(reference), summary
