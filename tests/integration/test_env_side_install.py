"""The env side installs and imports where only numpy, pyzmq and msgpack are: an old, minimal runtime.

README promises ``pip install --no-deps portal-shm numpy pyzmq msgpack`` for a runtime an agent
starts with ``python=``; import-linter keeps the env side's imports inside ``portal_shm.wire`` and
``portal_shm.server``, and this test proves the result in a real bare virtualenv.
"""

import os
import shutil
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.build  # builds a bare virtualenv and installs the package into it

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

CHECK = textwrap.dedent("""
    import importlib, pkgutil, sys
    import portal_shm, portal_shm.server, portal_shm.wire
    # envs (and wrappers of envs) need an env library; __main__ would start a server
    ENVS_THEMSELVES = ("portal_shm.server.presets", "portal_shm.server.example_envs", "portal_shm.server.__main__")
    assert portal_shm.__file__.startswith(sys.prefix), portal_shm.__file__  # the installed copy, not the tree
    names = [m.name for p in (portal_shm.wire, portal_shm.server) for m in pkgutil.iter_modules(p.__path__, p.__name__ + ".")]
    for name in names:
        if name not in ENVS_THEMSELVES:
            importlib.import_module(name)
    agent_side = {"gymnasium", "gym", "rich", "docker", "cloudpickle", "torch"} & set(sys.modules)
    assert not agent_side, agent_side
    print(len(names), "env-side modules imported")
""")


@pytest.fixture(scope="module")
def bare_python(tmp_path_factory):
    venv = tmp_path_factory.mktemp("bare") / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = str(venv / "bin" / "python")
    pip = [python, "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    subprocess.run(pip + ["numpy", "pyzmq", "msgpack"], check=True, timeout=600)
    source = tmp_path_factory.mktemp("source")  # a copy: building writes build/ into the tree it builds
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(os.path.join(ROOT, name), source / name)
    shutil.copytree(
        os.path.join(ROOT, "portal_shm"), source / "portal_shm", ignore=shutil.ignore_patterns("__pycache__")
    )
    subprocess.run(pip + ["--no-deps", str(source)], check=True, timeout=600, cwd=str(venv))
    return python


def test_env_side_imports_with_numpy_pyzmq_msgpack_only(bare_python):
    listed = subprocess.run(
        [bare_python, "-m", "pip", "list", "--format=freeze"], capture_output=True, text=True, check=True
    ).stdout
    installed = {line.split("==")[0].lower() for line in listed.split()}
    assert {"gymnasium", "rich", "docker"}.isdisjoint(installed), installed
    out = subprocess.run([bare_python, "-c", CHECK], capture_output=True, text=True, cwd="/")
    assert out.returncode == 0, out.stderr
    assert "env-side modules imported" in out.stdout


def test_env_server_entry_point_runs_in_the_bare_runtime(bare_python):
    out = subprocess.run([bare_python, "-m", "portal_shm.server", "--help"], capture_output=True, text=True, cwd="/")
    assert out.returncode == 0, out.stderr
    assert "--config" in out.stdout and "--listen" in out.stdout
    missing = subprocess.run([bare_python, "-m", "portal_shm.server"], capture_output=True, text=True, cwd="/")
    assert missing.returncode == 2 and "no config" in missing.stderr
