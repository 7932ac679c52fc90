"""Run TorchRL's own gym tests with gymnasium's vector envs built as portal-shm portals.

    python tests/compat/run_torchrl_gym_suite.py /path/to/rl [--baseline] [pytest args...]

The path holds TorchRL's ``test/`` folder at the installed torchrl's version (its wheel has no
tests); export only that folder, since a full checkout's ``torchrl/`` sources would be imported
instead of the installed package::

    git clone https://github.com/pytorch/rl /tmp/rl-repo
    mkdir /tmp/rl && git -C /tmp/rl-repo archive v0.14.1 test | tar -x -C /tmp/rl

Nothing is copied into this project or into the checkout: pytest runs in the checkout with the
plugins of ``tests/compat/plugin/`` loaded before collection. ``portal_shm_as_async`` makes
gymnasium's ``AsyncVectorEnv`` a ``VectorPortal``; ``portal_shm_in_torchrl`` makes
``SyncVectorEnv`` one too and ``GymEnv(id, num_envs=n)`` a ``portal_shm.make_vec(id, n)``.
``--baseline`` runs the same tests with gymnasium's own vector envs. Both modes load
``torchrl_gymnasium_ids``, which un-skips ``test_vecenvs_wrapper``/``test_vecenvs_env`` (their
parametrization under gymnasium is lost to ``implement_for``; see the plugin). The default
selection is ``test/libs/test_gym.py``, where every TorchRL test of gymnasium vector envs lives,
``GymEnv(num_envs=...)`` under a ``Collector`` included. The exit status is pytest's.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
PROJECT_ROOT = os.path.dirname(os.path.dirname(HERE))
SUITE = os.path.join("test", "libs", "test_gym.py")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkout", help="path holding TorchRL's test/ folder (test/libs/test_gym.py)")
    parser.add_argument("--baseline", action="store_true", help="run with gymnasium's own vector envs")
    args, pytest_args = parser.parse_known_args(argv)
    checkout = os.path.abspath(args.checkout)
    if not os.path.isfile(os.path.join(checkout, SUITE)):
        parser.error(f"{checkout} has no {SUITE}: pass the folder that holds TorchRL's test/ (git archive TAG test)")
    if os.path.isdir(os.path.join(checkout, "torchrl")):
        parser.error(
            f"{checkout} has TorchRL's sources (torchrl/), which pytest would import instead of the installed "
            "torchrl: export only its test/ folder (git archive TAG test | tar -x -C DIR)"
        )
    env = dict(os.environ)
    paths = [os.path.join(HERE, "plugin"), PROJECT_ROOT, env.get("PYTHONPATH", "")]
    env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rfEs", "-p", "torchrl_gymnasium_ids"]
    if not args.baseline:
        command += ["-p", "portal_shm_as_async", "-p", "portal_shm_in_torchrl"]
    command += pytest_args or [SUITE]
    print("+ (cd", checkout + ";", " ".join(command) + ")", flush=True)
    return subprocess.call(command, cwd=checkout, env=env)


if __name__ == "__main__":
    sys.exit(main())
