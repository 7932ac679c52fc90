"""Run gymnasium's own vector-env tests with ``AsyncVectorEnv`` replaced by ``portal_shm.VectorPortal``.

    python tests/compat/run_gymnasium_vector_suite.py /path/to/Gymnasium [--baseline] [pytest args...]

The path is a checkout of the Gymnasium repository at the installed gymnasium's version (its
sdist and wheel have no tests), e.g. for gymnasium 1.4.0::

    git clone https://github.com/Farama-Foundation/Gymnasium /tmp/Gymnasium
    git -C /tmp/Gymnasium checkout 95a790e19   # "Update to v1.4.0"

Nothing is copied into this project or into the checkout: pytest runs in the checkout (its tests
import each other as the package ``tests``) with the plugin ``tests/compat/plugin/
portal_shm_as_async.py`` loaded before collection, which patches ``gymnasium.vector.AsyncVectorEnv``.
``--baseline`` runs the same tests with gymnasium's own AsyncVectorEnv, for comparison. The exit
status is pytest's.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
PROJECT_ROOT = os.path.dirname(os.path.dirname(HERE))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkout", help="path of a Gymnasium repository checkout (with tests/vector)")
    parser.add_argument("--baseline", action="store_true", help="run with gymnasium's own AsyncVectorEnv")
    args, pytest_args = parser.parse_known_args(argv)
    checkout = os.path.abspath(args.checkout)
    if not os.path.isdir(os.path.join(checkout, "tests", "vector")):
        parser.error(f"{checkout} has no tests/vector: pass the root of a Gymnasium repository checkout")
    env = dict(os.environ)
    paths = [os.path.join(HERE, "plugin"), PROJECT_ROOT, env.get("PYTHONPATH", "")]
    env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rfE"]
    if not args.baseline:
        command += ["-p", "portal_shm_as_async"]
    command += pytest_args or ["tests/vector"]
    print("+ (cd", checkout + ";", " ".join(command) + ")", flush=True)
    return subprocess.call(command, cwd=checkout, env=env)


if __name__ == "__main__":
    sys.exit(main())
