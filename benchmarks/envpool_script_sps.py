"""A training script's SPS on envpool and on ``portal_shm.envpool``, side by side in one run.

``examples/ppo_atari_envpool.py`` is PPO written against envpool's API; it runs here as it stands
(portal-shm env servers) and, with its import line put back to envpool (and the ``backend=``
option, which envpool does not take, dropped), on envpool itself. Rounds alternate the
order so that drift hits both alike; each round's ratio pairs that round's two runs. The figure is
the script's own ``SPS`` over the whole run (env steps and PPO updates, as a user sees it).

    python benchmarks/envpool_script_sps.py --env-id Breakout-v5 --num-envs 8 --total-timesteps 16384 --rounds 3
    python benchmarks/envpool_script_sps.py --envpool-path /opt/envpool-site  # envpool installed elsewhere

envpool must be importable (``pip install envpool``, or its site folder given by ``--envpool-path``).
"""

from __future__ import annotations

import argparse
import datetime
import os
import pathlib
import platform
import re
import statistics
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "examples" / "ppo_atari_envpool.py"
IMPORT_LINE = "import portal_shm.envpool as envpool  # was: import envpool"
DONE = re.compile(r"^done: (\d+) env steps, SPS (\d+)", re.MULTILINE)


# envpool 1.x made env_type="gym" an alias of "gymnasium" (reset returns (obs, info), step five
# values); the script, like cleanrl's, is written for the gym type of envpool 0.x, which
# portal_shm.envpool provides. This shim gives envpool 1.x that API back (a few microseconds a step).
GYM0_SHIM = """
import envpool as _envpool


class _Gym0:
    def __init__(self, env):
        self._env = env

    def __getattr__(self, name):
        return getattr(self._env, name)

    def reset(self):
        return self._env.reset()[0]

    def step(self, action):
        obs, reward, terminated, truncated, info = self._env.step(action)
        info["TimeLimit.truncated"] = truncated
        return obs, reward, terminated | truncated, info


def make(task_id, env_type="gym", **kwargs):
    env = _envpool.make(task_id, env_type="gymnasium", **kwargs)
    return _Gym0(env) if env_type == "gym" and int(_envpool.__version__.split(".")[0]) >= 1 else env
"""


def envpool_variant(folder: str) -> str:
    """The example with envpool's own import: what its user ran before switching."""
    source = SCRIPT.read_text()
    if IMPORT_LINE not in source or "        **backend,\n" not in source:
        raise SystemExit(f"{SCRIPT} changed: cannot find its import line or its backend= option to swap")
    pathlib.Path(folder, "envpool_gym0.py").write_text(GYM0_SHIM)
    path = os.path.join(folder, "ppo_atari_envpool_original.py")
    source = source.replace(IMPORT_LINE, "import envpool_gym0 as envpool").replace("        **backend,\n", "")
    pathlib.Path(path).write_text(source)
    return path


def run(script: str, args: list, env: dict) -> int:
    done = subprocess.run([sys.executable, script, *args], capture_output=True, text=True, env=env, cwd=ROOT)
    found = DONE.search(done.stdout)
    if done.returncode != 0 or found is None:
        raise SystemExit(f"{script} failed ({done.returncode}):\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}")
    return int(found.group(2))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env-id", default="Breakout-v5")
    parser.add_argument("--num-envs", type=int, default=8)
    parser.add_argument("--total-timesteps", type=int, default=16384)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--envpool-path", help="a folder to put on PYTHONPATH for the envpool run")
    args = parser.parse_args()
    script_args = ["--env-id", args.env_id, "--num-envs", str(args.num_envs)]
    script_args += ["--total-timesteps", str(args.total_timesteps), "--tensorboard", ""]
    base_path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    portal_env = {**os.environ, "PYTHONPATH": base_path}
    envpool_env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [base_path, args.envpool_path]))}
    check = subprocess.run([sys.executable, "-c", "import envpool"], env=envpool_env, capture_output=True, text=True)
    if check.returncode != 0:
        raise SystemExit(f"envpool is not importable ({check.stderr.strip().splitlines()[-1]}): pip install envpool")
    with tempfile.TemporaryDirectory(prefix="envpool-script-") as folder:
        systems = {"envpool": (envpool_variant(folder), envpool_env), "portal_shm.envpool": (str(SCRIPT), portal_env)}
        names = list(systems)
        sps: dict = {name: [] for name in names}
        for r in range(args.rounds):
            for name in names[r % 2 :] + names[: r % 2]:
                script, env = systems[name]
                sps[name].append(run(script, script_args, env))
    print(f"# {datetime.date.today().isoformat()}: python benchmarks/envpool_script_sps.py {' '.join(sys.argv[1:])}")
    print(f"# {platform.node()}: {os.cpu_count()} cores, python {platform.python_version()}, {platform.platform()}")
    print(f"examples/ppo_atari_envpool.py {' '.join(script_args)}, {args.rounds} rounds, order alternating")
    for name in names:
        print(f"  {name:<18}  median SPS {statistics.median(sps[name]):>6,.0f}  (rounds: {sps[name]})")
    ratios = [b / a for a, b in zip(sps["envpool"], sps["portal_shm.envpool"])]
    print(
        f"  portal_shm.envpool / envpool: median {statistics.median(ratios):.3f}x "
        f"(rounds {min(ratios):.3f}-{max(ratios):.3f}; target >= 1.00x, issue 39)"
    )


if __name__ == "__main__":
    main()
