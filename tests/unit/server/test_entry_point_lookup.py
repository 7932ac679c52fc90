"""Named envs (``"module:callable"``) are looked up as AsyncVectorEnv's workers look up modules: on
the agent's import path, its script's folder first; a miss names what was searched and what to do."""

import json
import os
import subprocess
import sys
import sysconfig
import textwrap

import pytest

from portal_shm.server.envs import EnvNotFound, load_entry_point
from testkit.named_env_script import run_from_elsewhere


def test_a_script_naming_its_own_env_steps_when_run_from_another_folder(tmp_path):
    """``cd / && python /tmp/.../myenvs.py``, which calls ``make_vec("myenvs:cart", 2)``."""
    result = run_from_elsewhere(tmp_path)
    assert result.get("shape") == [2, 4], result


def test_a_misnamed_entry_point_names_the_module_the_folders_searched_and_fitting_advice(tmp_path):
    message = run_from_elsewhere(tmp_path, env="myenvz:cart")["not_found"]
    assert "entry point 'myenvz:cart': no module 'myenvz' on the env server's import path" in message
    searched = message.split("(searched ", 1)[1].split(")", 1)[0].split(", ")
    assert searched[0] == str(tmp_path)  # the script's folder, first, as in the agent
    assert searched[-1] == "the standard library" and sysconfig.get_paths()["purelib"] in searched
    assert "the import path of the program that started this server came first (the agent's" in message
    assert "put myenvz.py (or a package myenvz/) where that program's own 'import myenvz' finds it" in message
    assert "pass an entry point" not in message  # what the user did already
    assert "[runtime: process pid" in message


def test_a_runtime_without_the_agents_files_says_so():
    """A server given no import path (a container, a listener, a host) advises installing the module
    there, not moving it beside the agent's script."""
    with pytest.raises(EnvNotFound) as caught:
        load_entry_point("psm_no_such_module_3f:make")
    message = str(caught.value)
    assert "no module 'psm_no_such_module_3f' on the env server's import path (searched " in message
    assert "this runtime does not share the agent's files" in message
    assert "install 'psm_no_such_module_3f' in it" in message


def test_a_module_whose_dependency_is_missing_names_the_dependency(tmp_path, monkeypatch):
    (tmp_path / "psm_needs_dep.py").write_text("import psm_missing_dep_9c\n\ndef make():\n    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(
        EnvNotFound, match="importing module 'psm_needs_dep' needs 'psm_missing_dep_9c', which this runtime lacks"
    ):
        load_entry_point("psm_needs_dep:make")
    with pytest.raises(EnvNotFound, match="no package 'psm_no_package_7d' \\(of 'psm_no_package_7d.sub'\\)"):
        load_entry_point("psm_no_package_7d.sub:make")


def test_another_interpreter_gets_the_agents_own_folders_and_not_its_installation(tmp_path):
    """A venv's server must not see the agent's site-packages (its numpy would shadow the venv's)."""
    script_dir, extra = tmp_path / "project", tmp_path / "extra"
    script_dir.mkdir()
    extra.mkdir()
    script = script_dir / "agent.py"
    script.write_text(
        textwrap.dedent("""
            import json, sys
            sys.path.append("/opt/added-at-run-time")
            from portal_shm.runtimes.import_path import agent_import_path
            print(json.dumps({"same": agent_import_path(True), "other": agent_import_path(False)}))
        """)
    )
    env = {**os.environ, "PYTHONPATH": str(extra)}
    done = subprocess.run([sys.executable, str(script)], cwd="/", env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    paths = json.loads(done.stdout)
    own = [str(script_dir), str(extra), "/opt/added-at-run-time"]
    assert paths["other"] == own
    installation = [sysconfig.get_paths()[key] for key in ("stdlib", "purelib")]
    assert [p for p in paths["same"] if p in own] == own
    assert all(p in paths["same"] for p in installation)


def test_an_editable_installs_finder_marker_is_no_folder_a_server_gets(monkeypatch):
    """setuptools' editable installs put a path-hook marker on sys.path: the installation's, not a folder."""
    from portal_shm.runtimes.import_path import agent_import_path

    marker = "__editable__.portal_shm-0.1.0.finder.__path_hook__"
    monkeypatch.setattr(sys, "path", [marker, *sys.path])
    for same in (True, False):
        assert not any(p.endswith(marker) for p in agent_import_path(same))
