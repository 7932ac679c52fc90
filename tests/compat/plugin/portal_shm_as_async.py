"""pytest plugin: gymnasium's ``AsyncVectorEnv`` is ``portal_shm.VectorPortal`` for the whole run.

Loaded with ``-p portal_shm_as_async`` (``run_gymnasium_vector_suite.py`` and
``run_torchrl_gym_suite.py`` do this), so the patch is in place before any test module runs
``from gymnasium.vector import AsyncVectorEnv``; the registry's
``gym.make_vec(..., vectorization_mode="async")`` then builds a VectorPortal as well. This module
lives outside any ``tests`` package on purpose: gymnasium's test suite is a package named ``tests``
too.
"""

from __future__ import annotations

import glob
import os

import gymnasium.vector
import gymnasium.vector.async_vector_env

from portal_shm import VectorPortal

gymnasium.vector.AsyncVectorEnv = VectorPortal
gymnasium.vector.async_vector_env.AsyncVectorEnv = VectorPortal


def pytest_report_header(config: object) -> str:
    return f"gymnasium.vector.AsyncVectorEnv is portal_shm.VectorPortal ({VectorPortal.__module__})"


def pytest_sessionfinish(session: object, exitstatus: int) -> None:
    """Every portal of the run must have removed its shared memory (they are named after our pid)."""
    left = glob.glob(f"/dev/shm/psm-{os.getpid()}-*") + glob.glob(f"/dev/shm/sem.psm-{os.getpid()}-*")
    if left:
        print(f"\nportal-shm leftovers after the suite: {left}")
        session.exitstatus = 1
