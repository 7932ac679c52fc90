"""Run cleanrl's published ``ppo_atari_envpool.py`` over ``portal_shm.envpool``, changed in one line only.

    python tests/compat/run_cleanrl_envpool.py /path/to/ppo_atari_envpool.py [--workdir DIR] [script args...]

The path is the script from a checkout of https://github.com/vwxyzjn/cleanrl (``cleanrl/
ppo_atari_envpool.py``; the cleanrl releases on PyPI predate it), e.g.::

    git clone https://github.com/vwxyzjn/cleanrl /tmp/cleanrl
    python tests/compat/run_cleanrl_envpool.py /tmp/cleanrl/cleanrl/ppo_atari_envpool.py \\
        --env-id Pong-v5 --total-timesteps 4096 --num-envs 4 --num-steps 128

Nothing is copied into this project: a temporary copy of the script, under its own file name (the
script names its run after it), has its line ``import envpool`` replaced by ``import
portal_shm.envpool as envpool`` and nothing else; the runner refuses a script where that line is not
found exactly once, since then the script is not the one this drop-in claims to run. The other
arguments go to the script (tyro: ``--help`` lists them). The script writes TensorBoard logs under
``runs/`` of ``--workdir`` (default: a temporary folder, removed afterwards). The exit status is the
script's.

What the script imports beside portal-shm, with ale-py for the games: torch (this project's train
extra), gym, tyro and tensorboard (for ``torch.utils.tensorboard``)::

    pip install -e '.[train,atari]' -c constraints.txt
    pip install gym==0.26.2 tyro tensorboard
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
PROJECT_ROOT = os.path.dirname(os.path.dirname(HERE))
ORIGINAL = "import envpool"
REPLACEMENT = "import portal_shm.envpool as envpool"
# module the script imports -> what to install for it
NEEDED = {"torch": "torch", "gym": "gym==0.26.2", "tyro": "tyro", "tensorboard": "tensorboard", "ale_py": "ale-py"}


def with_portal_import(source: str, path: str) -> str:
    """``source`` with its one ``import envpool`` line replaced; an error when there is not exactly one."""
    lines = source.splitlines(keepends=True)
    found = [i for i, line in enumerate(lines) if line.rstrip("\r\n") == ORIGINAL]
    if len(found) != 1:
        raise SystemExit(
            f"error: {path} has {len(found)} lines that read exactly {ORIGINAL!r} (expected one): this is not the "
            "cleanrl envpool script the runner changes; pass cleanrl/ppo_atari_envpool.py of a cleanrl checkout"
        )
    ending = lines[found[0]][len(ORIGINAL) :]
    lines[found[0]] = REPLACEMENT + ending
    return "".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("script", help="path of cleanrl's ppo_atari_envpool.py (from a cleanrl checkout)")
    parser.add_argument("--workdir", help="folder the script runs in and writes runs/ to (default: temporary)")
    args, script_args = parser.parse_known_args(argv)
    path = os.path.abspath(args.script)
    if not os.path.isfile(path):
        parser.error(f"{path} is not a file: pass the path of cleanrl/ppo_atari_envpool.py in a cleanrl checkout")
    missing = [package for module, package in NEEDED.items() if importlib.util.find_spec(module) is None]
    if missing:
        parser.error(f"the script needs {', '.join(missing)}: pip install {' '.join(missing)}")
    with open(path, encoding="utf-8") as file:
        changed = with_portal_import(file.read(), path)
    scratch = tempfile.mkdtemp(prefix="portal-shm-cleanrl-")
    try:
        copy = os.path.join(scratch, os.path.basename(path))
        with open(copy, "w", encoding="utf-8") as file:
            file.write(changed)
        workdir = os.path.abspath(args.workdir) if args.workdir else scratch
        os.makedirs(workdir, exist_ok=True)
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (PROJECT_ROOT, env.get("PYTHONPATH", "")) if p)
        command = [sys.executable, copy, *script_args]
        print(f"+ (cd {workdir}; {' '.join(command)})  # {path} with {ORIGINAL!r} -> {REPLACEMENT!r}", flush=True)
        return subprocess.call(command, cwd=workdir, env=env)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
