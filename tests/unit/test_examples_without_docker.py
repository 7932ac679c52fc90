"""The examples answer a missing Docker with one line that names ``--backend process`` and exit 2.

Each example's own ``parse_args`` and ``make_envs`` run in this process with ``--backend docker``
while ``DOCKER_HOST`` points at a socket that does not exist: portal-shm raises its
``DockerUnavailableError`` (as it does without the docker SDK), and the example must turn it into
that line on stderr, with no traceback.
"""

from __future__ import annotations

import importlib.util
import pathlib
import sys

import pytest

pytestmark = pytest.mark.fast

ROOT = pathlib.Path(__file__).parents[2]
# script -> packages it imports beyond the agent's own
EXAMPLES = {
    "ppo_atari.py": ["torch"],
    "ppo_vizdoom.py": ["torch"],
    "ppo_multi_agent.py": ["torch"],
    "ppo_atari_envpool.py": ["torch"],
    "reinforce_cartpole.py": [],
}


def load(script: str, monkeypatch: pytest.MonkeyPatch) -> object:
    name = "example_" + script[: -len(".py")]
    spec = importlib.util.spec_from_file_location(name, ROOT / "examples" / script)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, name, module)  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("script", sorted(EXAMPLES))
def test_missing_docker_is_one_line_naming_the_process_backend(script, monkeypatch, capsys):
    for package in EXAMPLES[script]:
        pytest.importorskip(package)
    example = load(script, monkeypatch)
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    monkeypatch.setattr(sys, "argv", [script, "--backend", "docker"])
    args = example.parse_args()
    with pytest.raises(SystemExit) as exited:
        example.make_envs(args)
    assert exited.value.code == 2
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"{script}: no Docker") and "--backend process" in lines[0]
    assert "Traceback" not in err
