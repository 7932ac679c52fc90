"""pytest plugin: TorchRL's gym tests build every gymnasium vector env as a portal.

Loaded with ``-p portal_shm_as_async -p portal_shm_in_torchrl`` (``run_torchrl_gym_suite.py``
does this): the first makes gymnasium's ``AsyncVectorEnv`` a ``VectorPortal``; this one adds what
TorchRL's tests build besides:

- ``gymnasium.vector.SyncVectorEnv`` is ``VectorPortal`` too (the tests wrap both kinds in
  ``GymWrapper``, looking the class up on ``gymnasium.vector`` when they run);
- ``GymEnv(id, num_envs=n)`` builds ``portal_shm.make_vec(id, n)``. TorchRL makes that env in
  ``GymEnv._async_env`` from ``[functools.partial(gymnasium.make, id, **kwargs)] * n``; the plugin
  replaces that one method, so ``GymEnv`` gets the constructor portal-shm's users call, with
  ``make_vec``'s defaults (the arrays it hands out, the autoreset mode), not the drop-in's.

Nothing else of TorchRL is touched: ``GymWrapper`` sees a gymnasium ``VectorEnv`` and wraps it as
it wraps gymnasium's own.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Sequence

import gymnasium
import gymnasium.vector
import gymnasium.vector.sync_vector_env
import torchrl
from torchrl.envs.libs.gym import GymEnv

import portal_shm
from portal_shm import VectorPortal

gymnasium.vector.SyncVectorEnv = VectorPortal
gymnasium.vector.sync_vector_env.SyncVectorEnv = VectorPortal


def _make_vec_for_gym_env(self: GymEnv, env_fns: Sequence[Callable[[], Any]], **vector_kwargs: Any) -> Any:
    first = env_fns[0]
    if not (
        isinstance(first, functools.partial)
        and first.func is gymnasium.make
        and len(first.args) == 1
        and all(fn is first for fn in env_fns)
    ):
        raise TypeError(
            "portal_shm_in_torchrl expected GymEnv._async_env to get [functools.partial(gymnasium.make, id, "
            f"**kwargs)] * num_envs, got {env_fns!r}: this TorchRL builds its vector envs differently; update "
            "the plugin to its way"
        )
    return portal_shm.make_vec(
        first.args[0], len(env_fns), env_kwargs=dict(first.keywords), vector_kwargs=vector_kwargs or None
    )


GymEnv._async_env = _make_vec_for_gym_env


def pytest_report_header(config: object) -> str:
    return (
        f"torchrl {torchrl.__version__} ({torchrl.__file__}): gymnasium.vector.SyncVectorEnv is "
        "portal_shm.VectorPortal; GymEnv(id, num_envs=n) is portal_shm.make_vec(id, n)"
    )
