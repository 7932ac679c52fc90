"""The venv and micromamba backends: envs with their own dependencies, built once, cached and shared.

The point of the product: this agent runs numpy 2 and gymnasium 1, yet steps envs that need
numpy<2 and legacy gym 0.26 (one of them written against the pre-0.26 API), each in a venv the
backend builds from a requirements list, and gets exactly what stepping those envs directly in
their own runtime gives. Everything the venvs need comes from PyPI through the backend's own build.
"""

import argparse
import json
import os
import subprocess
import sys
import textwrap
import time

import gymnasium
import numpy as np
import pytest

import portal_shm
from portal_shm import VectorPortal
from portal_shm.backends import EnvSpec
from portal_shm.cli.env import add_env_commands
from portal_shm.runtimes.cache import BUILD_LOG, MARKER
from portal_shm.runtimes.installers import find_uv
from portal_shm.runtimes.micromamba import MicromambaBackend, ensure_micromamba_env
from portal_shm.runtimes.venv import (
    RuntimeBuildError,
    VenvBackend,
    ensure_venv,
    list_venvs,
    remove_venv,
    venv_hash,
    venv_python,
)
from testkit.named_env_script import run_from_elsewhere

pytestmark = pytest.mark.build  # builds venvs and micromamba envs from the package index

LEGACY_DIR = os.path.join(
    os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "portal_shm", "images", "legacy"
)
REQUIREMENTS = ("numpy<2", "gym==0.26.2")
STEPS = 60

# Steps an env directly in its own runtime (the venv's python), with the semantics a VectorPortal
# promises: gymnasium's NextStep autoreset, and pre-0.26 `done` split by info["TimeLimit.truncated"].
REFERENCE = textwrap.dedent("""
    import importlib, json, sys
    import numpy as np
    args = json.loads(sys.argv[1])
    legacy = ":" in args["id"]
    if legacy:
        module, _, attr = args["id"].partition(":")
        make = getattr(importlib.import_module(module), attr)
    else:
        import gym
        make = lambda: gym.make(args["id"])
    out = {"numpy": np.__version__, "envs": []}
    for seed, actions in zip(args["seeds"], args["actions"]):
        env = make()
        def reset(seed=None):
            if legacy:
                if seed is not None:
                    env.seed(seed)
                return env.reset()
            return env.reset(seed=seed)[0]
        def step(action):
            if legacy:
                obs, reward, done, info = env.step(action)
                truncated = bool(info.get("TimeLimit.truncated", False))
                return obs, reward, done and not truncated, truncated
            return env.step(action)[:4]
        record = {"obs": [reset(seed).tolist()], "reward": [], "terminated": [], "truncated": []}
        ended = False
        for action in actions:
            obs, reward, terminated, truncated = (reset(), 0.0, False, False) if ended else step(action)
            ended = terminated or truncated
            for key, value in zip(("obs", "reward", "terminated", "truncated"),
                                  (obs.tolist(), float(reward), bool(terminated), bool(truncated))):
                record[key].append(value)
        out["envs"].append(record)
    print(json.dumps(out))
""")


@pytest.fixture(scope="module")
def legacy_venv(tmp_path_factory):
    """One venv with numpy<2 and gym 0.26 for the whole module (the slow part: built once)."""
    cache = str(tmp_path_factory.mktemp("portal-shm-cache"))
    backend = VenvBackend(requirements=list(REQUIREMENTS), cache_dir=cache)
    started = time.monotonic()
    path = ensure_venv(backend)
    return backend, path, time.monotonic() - started


@pytest.mark.parametrize("env_id", ["CartPole-v1", "psm_legacy_walk:make"])
def test_numpy2_agent_steps_legacy_gym_env_in_its_venv_exactly(legacy_venv, env_id, tmp_path, monkeypatch):
    backend, path, _ = legacy_venv
    assert int(np.__version__.split(".")[0]) >= 2 and int(gymnasium.__version__.split(".")[0]) >= 1
    monkeypatch.setenv("PYTHONPATH", LEGACY_DIR)  # the servers inherit it: only the legacy env module is there
    monkeypatch.chdir(tmp_path)  # so the servers import portal_shm from the venv, not from a source checkout
    seeds = [3, 11]
    envs = VectorPortal([EnvSpec(env_id, {}, backend)] * 2, step_timeout=30)
    try:
        assert all(f"python {venv_python(path)}" in server["runtime"] for server in envs.servers)
        if ":" in env_id:
            assert all(v.startswith("1.") for v in envs.get_attr("numpy_version"))
            assert envs.get_attr("gym_version") == ("0.26.2", "0.26.2")
            assert all(p.startswith(path) for p in envs.get_attr("portal_shm_location"))
        actions = np.random.default_rng(0).integers(0, envs.single_action_space.n, (STEPS, 2))
        obs, _ = envs.reset(seed=seeds)
        observations, rewards, terminated, truncated = [obs.copy()], [], [], []
        for action in actions:
            obs, reward, term, trunc, _ = envs.step(action)
            observations.append(obs.copy())
            rewards.append(reward.copy())
            terminated.append(term.copy())
            truncated.append(trunc.copy())
    finally:
        envs.close()
    args = json.dumps({"id": env_id, "seeds": seeds, "actions": actions.T.tolist()})
    done = subprocess.run([venv_python(path), "-c", REFERENCE, args], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    reference = json.loads(done.stdout)
    assert reference["numpy"].startswith("1.")
    for i, ref in enumerate(reference["envs"]):
        np.testing.assert_array_equal(np.stack(observations)[:, i], np.asarray(ref["obs"], np.float32))
        np.testing.assert_array_equal(np.stack(rewards)[:, i], ref["reward"])
        np.testing.assert_array_equal(np.stack(terminated)[:, i], ref["terminated"])
        np.testing.assert_array_equal(np.stack(truncated)[:, i], ref["truncated"])
    assert np.any(terminated) or np.any(truncated), "the rollout should cross an autoreset"


def test_env_fns_are_shipped_to_a_venv_with_cloudpickle(legacy_venv, tmp_path, monkeypatch):
    """A factory (as for AsyncVectorEnv) runs in a numpy 1 + gym 0.26 venv (gym brings cloudpickle);
    a venv without cloudpickle says what to add."""
    backend, path, _ = legacy_venv
    monkeypatch.chdir(tmp_path)
    factory = lambda: __import__("gym").make("CartPole-v1")  # noqa: E731  gym exists only in the venv
    envs = VectorPortal([factory] * 2, backend=backend, step_timeout=30)
    try:
        assert all(f"python {venv_python(path)}" in server["runtime"] for server in envs.servers)
        obs, _ = envs.reset(seed=[3, 11])
        assert obs.shape == (2, 4) and envs.step(np.ones(2, np.int64))[0].shape == (2, 4)
        assert envs.get_attr("gravity") == (9.8, 9.8)
    finally:
        envs.close()
    bare = VenvBackend(requirements=[], cache_dir=str(tmp_path / "bare"))  # only the env server's own dependencies
    with pytest.raises(portal_shm.EnvError, match="cloudpickle is not installed"):
        VectorPortal([factory], backend=bare)


def test_a_script_naming_its_own_env_steps_in_a_venv_when_run_from_another_folder(legacy_venv, tmp_path):
    """``cd / && python /tmp/.../myenvs.py`` calling ``make_vec("myenvs:cart", 2, backend="venv", ...)``:
    the venv's server finds ``myenvs`` in the script's folder, and still only its own numpy 1, not
    the agent's numpy 2 (the agent's site-packages stay out of the venv)."""
    backend, _, _ = legacy_venv
    options = {"backend": "venv", "requirements": list(REQUIREMENTS), "cache_dir": backend.cache_dir}
    result = run_from_elsewhere(tmp_path, backend=options)
    assert result.get("shape") == [2, 4], result
    assert all(version.startswith("1.") for version in result["numpy"]) and np.__version__.startswith("2.")
    message = run_from_elsewhere(tmp_path, env="myenvz:cart", backend=options)["not_found"]
    searched = message.split("(searched ", 1)[1].split(")", 1)[0].split(", ")
    assert searched[0] == str(tmp_path) and "started this server came first (the agent's" in message
    assert not any(path.startswith(sys.prefix) for path in searched)  # the agent's venv is not the runtime's


def test_second_creation_is_a_cache_hit(legacy_venv):
    backend, path, _ = legacy_venv
    same = VenvBackend(requirements=tuple(reversed(REQUIREMENTS)), cache_dir=backend.cache_dir)
    assert same.requirements == tuple(reversed(REQUIREMENTS)) and hash(same) == hash(same)
    assert venv_hash(same) == venv_hash(backend)
    started = time.monotonic()
    assert ensure_venv(same) == path
    assert time.monotonic() - started < 1.0
    [info] = list_venvs(backend.cache_dir)
    assert info["path"] == path and info["complete"] and info["requirements"] == sorted(REQUIREMENTS)
    assert os.path.exists(os.path.join(path, BUILD_LOG)) and info["size"] > 10_000_000
    other = VenvBackend(requirements=("numpy<2",), cache_dir=backend.cache_dir)
    assert venv_hash(other) != venv_hash(backend)


def test_two_agents_creating_one_venv_at_once_build_it_once(tmp_path):
    cache = str(tmp_path / "cache")
    code = (
        "from portal_shm.runtimes.venv import VenvBackend, ensure_venv\n"
        f"print(ensure_venv(VenvBackend(requirements=['msgpack'], cache_dir={cache!r})))"
    )
    agents = [
        subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    results = [agent.communicate(timeout=240) for agent in agents]
    assert [agent.returncode for agent in agents] == [0, 0], results
    paths = {out.strip() for out, _ in results}
    assert len(paths) == 1
    assert sum(err.count("built in") for _, err in results) == 1, results
    [info] = list_venvs(cache)
    assert info["path"] == paths.pop() and info["complete"]
    assert sorted(os.listdir(os.path.join(cache, "venvs"))) == [info["hash"]]


def test_pip_builds_the_venv_when_uv_is_not_wanted(tmp_path, monkeypatch):
    monkeypatch.setenv("PORTAL_SHM_INSTALLER", "pip")
    path = ensure_venv(VenvBackend(requirements=["msgpack"], cache_dir=str(tmp_path)))
    [info] = list_venvs(str(tmp_path))
    assert info["installer"] == "pip"
    probe = (
        "import numpy, portal_shm.server, sys\n"
        "try:\n    import gymnasium\nexcept ImportError:\n    gymnasium = None\n"
        "print(numpy.__file__, portal_shm.__file__, gymnasium)"
    )
    out = subprocess.run(
        [venv_python(path), "-c", probe], capture_output=True, text=True, cwd=str(tmp_path), check=True
    )
    numpy_file, portal_file, gymnasium_found = out.stdout.split()
    assert numpy_file.startswith(path) and portal_file.startswith(path)
    assert gymnasium_found == "None", "the venv must not see the agent's site-packages"


def test_failed_install_raises_with_installer_output_and_leaves_no_cache_entry(tmp_path):
    cache = str(tmp_path)
    backend = VenvBackend(requirements=("portal-shm-no-such-package-4f9a",), cache_dir=cache)
    with pytest.raises(RuntimeBuildError) as info:
        VectorPortal([EnvSpec("CartPole-v1", {}, backend)])
    message = str(info.value)
    assert message.startswith(f"building venv {venv_hash(backend)} failed, nothing was cached")
    assert "-m pip install --no-input portal-shm-no-such-package-4f9a" in message  # the command
    assert "No matching distribution found for portal-shm-no-such-package-4f9a" in message  # its output
    if find_uv():
        assert "uv had failed first" in message and "not found in the package registry" in message
    assert list_venvs(cache) == []
    assert os.listdir(os.path.join(cache, "venvs")) == []
    assert not [name for name in os.listdir("/dev/shm") if f"psm-{os.getpid()}-" in name]


def test_cli_env_create_ls_rm(tmp_path, capsys):
    parser = argparse.ArgumentParser(prog="portal-shm")
    add_env_commands(parser.add_subparsers(dest="command", required=True))
    cache = str(tmp_path)

    def run(*argv):
        args = parser.parse_args(list(argv))
        assert args.func(args) == 0
        return capsys.readouterr().out

    out = run("env", "create", "msgpack", "--cache-dir", cache)
    [info] = list_venvs(cache)
    assert info["hash"] in out and info["path"] in out
    assert info["hash"] in run("env", "ls", "--cache-dir", cache)
    assert "removed venv " + info["hash"] in run("env", "rm", info["hash"][:6], "--cache-dir", cache)
    assert "no cached runtimes" in run("env", "ls", "--cache-dir", cache)
    with pytest.raises(portal_shm.PortalError, match="no cached runtime"):
        remove_venv("abc", cache)


# -- micromamba ----------------------------------------------------------------------------------

FAKE_MICROMAMBA = """#!{python}
# Stands in for micromamba: records its argv, makes a prefix with a python, runs commands in it.
import json, os, subprocess, sys, sysconfig
args = sys.argv[1:]
with open(os.environ["FAKE_MICROMAMBA_LOG"], "a") as log:
    log.write(json.dumps(args) + "\\n")
prefix = args[args.index("-p") + 1]
if args[0] == "create":
    subprocess.check_call([sys.executable, "-m", "venv", "--without-pip", prefix])
    # The packages of the python that runs this stand-in (a virtualenv's too, which a venv made from
    # it would not see through --system-site-packages), as a real env would have installed them.
    purelib = subprocess.check_output([os.path.join(prefix, "bin", "python"), "-c",
                                       "import sysconfig; print(sysconfig.get_paths()['purelib'])"], text=True).strip()
    with open(os.path.join(purelib, "outer-packages.pth"), "w") as pth:
        pth.write(sysconfig.get_paths()["purelib"] + "\\n")
elif args[0] == "run":
    env = dict(os.environ, CONDA_PREFIX=prefix, PATH=os.path.join(prefix, "bin") + os.pathsep + os.environ["PATH"])
    sys.exit(subprocess.call(args[args.index("-p") + 2:], env=env))
"""


def test_micromamba_missing_says_so_and_how_to_install(tmp_path, monkeypatch):
    spec = tmp_path / "spec.yml"
    spec.write_text("dependencies: [python=3.11]\n")
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    monkeypatch.delenv("MAMBA_EXE", raising=False)
    with pytest.raises(portal_shm.PortalError, match="micromamba.*no.*on PATH.*Install it"):
        VectorPortal([EnvSpec("CartPole-v1", {}, MicromambaBackend(spec=str(spec), cache_dir=str(tmp_path)))])


def test_micromamba_builds_runs_setup_caches_and_serves(tmp_path, monkeypatch):
    bin_dir, log = tmp_path / "bin", tmp_path / "micromamba-argv.jsonl"
    bin_dir.mkdir()
    fake = bin_dir / "micromamba"
    fake.write_text(FAKE_MICROMAMBA.format(python=sys.executable))
    fake.chmod(0o755)
    spec, script = tmp_path / "spec.yml", tmp_path / "setup.sh"
    spec.write_text("name: test\ndependencies:\n  - python=3.11\n  - pip\n")
    script.write_text('python -c "import sys; print(sys.prefix)" > "$CONDA_PREFIX/setup-ran"\n')
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_MICROMAMBA_LOG", str(log))
    monkeypatch.chdir(tmp_path)
    backend = MicromambaBackend(spec="spec.yml", setup_script=str(script), cache_dir=str(tmp_path / "cache"))
    envs = VectorPortal([EnvSpec("CartPole-v1", {}, backend)] * 2)
    try:
        prefix = ensure_micromamba_env(backend)
        assert all(f"micromamba env {os.path.basename(prefix)}" in s["runtime"] for s in envs.servers)
        obs, _ = envs.reset(seed=[5, 6])
        np.testing.assert_array_equal(obs[1], gymnasium.make("CartPole-v1").reset(seed=6)[0])
        envs.step(np.array([0, 1]))
    finally:
        envs.close()
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    assert calls == [["create", "-y", "-p", prefix, "-f", str(spec)], ["run", "-p", prefix, "bash", str(script)]]
    with open(os.path.join(prefix, "setup-ran")) as handle:
        assert handle.read().strip() == prefix  # the script's python was the env's
    assert os.path.exists(os.path.join(prefix, MARKER))
    assert (
        ensure_micromamba_env(
            MicromambaBackend(spec=str(spec), setup_script=str(script), cache_dir=str(tmp_path / "cache"))
        )
        == prefix
    )
    assert len(log.read_text().splitlines()) == 2, "a cache hit runs no micromamba"
