"""``scripts/release.sh``: the two distributions it builds, what each wheel holds and requires."""

import email
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from portal_shm.runtimes.image_build import builtin_images
from portal_shm.version import __version__

ROOT = Path(__file__).resolve().parents[2]
ENV_REQUIRES = {"numpy", "pyzmq", "msgpack"}


@pytest.fixture(scope="module")
def release(tmp_path_factory):
    """The release's folder, made once by the script as a maintainer runs it (about 10 s)."""
    for module in ("build", "twine"):
        pytest.importorskip(module, reason="scripts/release.sh needs build and twine (the dev extra)")
    scratch = tmp_path_factory.mktemp("release")
    dest = scratch / "dist"
    result = subprocess.run(
        ["bash", str(ROOT / "scripts" / "release.sh"), str(dest)],
        capture_output=True,
        text=True,
        timeout=240,
        env={**os.environ, "PYTHON": sys.executable, "TMPDIR": str(scratch)},
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert [p.name for p in scratch.iterdir()] == ["dist"], "the script's staging directory was left behind"
    return dest


def _wheel(release: Path, name: str) -> zipfile.ZipFile:
    return zipfile.ZipFile(release / f"{name}-{__version__}-py3-none-any.whl")


def _files(wheel: zipfile.ZipFile) -> set:
    return {name for name in wheel.namelist() if ".dist-info/" not in name}


def _metadata(wheel: zipfile.ZipFile) -> email.message.Message:
    (path,) = [name for name in wheel.namelist() if name.endswith(".dist-info/METADATA")]
    return email.message_from_bytes(wheel.read(path))


def test_release_makes_both_sdists_and_wheels_of_the_version(release):
    assert sorted(p.name for p in release.iterdir()) == sorted(
        [
            f"portal_shm-{__version__}-py3-none-any.whl",
            f"portal_shm-{__version__}.tar.gz",
            f"portal_shm_env-{__version__}-py3-none-any.whl",
            f"portal_shm_env-{__version__}.tar.gz",
        ]
    )


def test_the_wheels_share_no_file_and_together_hold_the_whole_package(release):
    env, agent = _files(_wheel(release, "portal_shm_env")), _files(_wheel(release, "portal_shm"))
    assert not env & agent
    assert {"portal_shm/__init__.py", "portal_shm/version.py", "portal_shm/presets.py"} <= env
    assert any(n.startswith("portal_shm/server/") for n in env) and any(n.startswith("portal_shm/wire/") for n in env)
    assert not any(n.startswith(("portal_shm/cli/", "portal_shm/agent/", "portal_shm/images/")) for n in env)
    package = ROOT / "portal_shm"
    checkout = {
        path.relative_to(ROOT).as_posix()
        for path in package.rglob("*")
        if path.is_file() and "__pycache__" not in path.parts and (path.suffix == ".py" or "images" in path.parts)
    }
    assert checkout - (env | agent) == set(), "files of the checkout in neither wheel"


def test_the_env_wheel_requires_only_numpy_pyzmq_and_msgpack_on_python_39(release):
    metadata = _metadata(_wheel(release, "portal_shm_env"))
    assert metadata["Name"] == "portal-shm-env" and metadata["Version"] == __version__
    assert metadata["Requires-Python"] == ">=3.9"
    requires = metadata.get_all("Requires-Dist")
    assert {r.split(">")[0].split("=")[0].split(";")[0].strip() for r in requires} == ENV_REQUIRES, requires


def test_the_agent_wheel_requires_the_env_side_of_its_version_and_carries_the_images(release):
    wheel = _wheel(release, "portal_shm")
    metadata = _metadata(wheel)
    assert metadata["Name"] == "portal-shm" and metadata["Version"] == __version__
    assert f"portal-shm-env=={__version__}" in metadata.get_all("Requires-Dist")
    files = _files(wheel)
    assert "portal_shm/images/ale/Dockerfile" in files
    assert {f"portal_shm/images/{name}/Dockerfile" for name in builtin_images()} <= files
    entry_points = wheel.read(f"portal_shm-{__version__}.dist-info/entry_points.txt").decode()
    assert "portal-shm = portal_shm.cli:main" in entry_points
    tomllib = pytest.importorskip("tomllib" if sys.version_info >= (3, 11) else "tomli")
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert set(metadata.get_all("Provides-Extra")) == set(extras)  # what the docs' installs name
