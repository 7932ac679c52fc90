"""A user's script that names its own env (``make_vec("myenvs:cart")`` inside ``myenvs.py``), run as
``python /some/dir/myenvs.py`` from another folder: the case where only the script's folder, as
``sys.path[0]``, makes ``myenvs`` importable. Shared by the process (unit) and venv (build) tests."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent("""
    import json, sys
    import portal_shm

    def cart():
        try:
            import gymnasium as gym
        except ImportError:  # a runtime with only legacy gym
            import gym
        import numpy
        env = gym.make("CartPole-v1")
        env.unwrapped.numpy_version = numpy.__version__
        return env

    if __name__ == "__main__":
        args = json.loads(sys.argv[1])
        try:
            envs = portal_shm.make_vec(args["env"], 2, **args["backend"])
        except portal_shm.errors.EnvNotFoundError as exc:
            print(json.dumps({"not_found": str(exc)}))
            sys.exit(0)
        try:
            obs, _ = envs.reset(seed=0)
            obs, *_ = envs.step([0, 1])
            print(json.dumps({"shape": list(obs.shape), "numpy": list(envs.get_attr("numpy_version"))}))
        finally:
            envs.close()
""")


def run_from_elsewhere(folder, env: str = "myenvs:cart", backend: dict | None = None, timeout: float = 300) -> dict:
    """Write ``myenvs.py`` into ``folder`` and run it with the agent's Python from ``/``; its JSON line."""
    path = folder / "myenvs.py"
    path.write_text(SCRIPT)
    args = json.dumps({"env": env, "backend": backend or {}})
    done = subprocess.run([sys.executable, str(path), args], cwd="/", capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])
