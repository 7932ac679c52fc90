"""Stable-Baselines3 on portal-shm: ``SubprocVecEnv(env_fns)`` in place of SB3's, or ``SB3VecEnv(portal)``.

```python
from portal_shm.sb3 import SubprocVecEnv  # was: from stable_baselines3.common.vec_env import SubprocVecEnv
from stable_baselines3 import PPO
from stable_baselines3.common.env_util import make_vec_env

model = PPO("MlpPolicy", make_vec_env("CartPole-v1", 8, vec_env_cls=SubprocVecEnv)).learn(10_000)
```

``SubprocVecEnv`` takes SB3's arguments and builds its own portal; ``SB3VecEnv`` puts an SB3
``VecEnv`` over a portal (or any gymnasium vector env) the caller made, e.g. one with envs in
containers; ``flat_agents_vec_env`` puts one over a group of PettingZoo agents (parameter
sharing, ``portal_shm.agent.multi_agent.flat``). SB3 resets an env in the same ``step`` that ended its
episode and hands the episode's last observation over as ``infos[i]["terminal_observation"]``:
that is gymnasium's SAME_STEP autoreset. ``SubprocVecEnv`` makes its portal in that mode; ``SB3VecEnv`` uses a SAME_STEP portal as
it is and resets the ended envs of a NEXT_STEP or DISABLED one itself, in the step that ended them
(one more round trip on steps where an episode ends). Infos become SB3's list of per-env dicts, with
``"TimeLimit.truncated"`` set as SB3's own VecEnvs set it, and the infos of the resets in
``reset_infos``.

Observations: ``SB3VecEnv(portal)``'s observations are whatever the portal returns: fresh arrays
from a default portal (``copy=True``), or, from a portal made with ``copy=False``, views of its
shared-memory ring, valid until ``ring_depth - 1`` further steps (4 by default: 3 steps).
SB3's algorithms hold an observation for one step (``_last_obs``) and copy it into their rollout or
replay buffer, so views are enough for them; a callback or wrapper that keeps observations longer
needs the default (or ``SB3VecEnv(portal, copy=True)``). ``SubprocVecEnv`` returns fresh arrays, as
SB3's does (``copy=False`` among its portal options gives views). Terminal observations are always
fresh arrays: SB3 keeps them in the infos.
"""

from __future__ import annotations

import multiprocessing
from typing import Any, Callable, Optional, Sequence

import numpy as np
from gymnasium.vector import AutoresetMode

from .api import VectorPortal
from .multi_agent import make_vec_ma
from .sb3_vec_env import Indices, SB3VecEnv
from .sb3_vec_env import batch_actions as batch_actions  # (portal_shm.sb3's names before the split)
from .sb3_vec_env import unbatch_infos as unbatch_infos
from .sb3_vec_env import wrapper_names as wrapper_names

try:
    import cloudpickle
except ImportError as _exc:  # pragma: no cover - depends on the installation
    raise ImportError("portal_shm.sb3 needs stable-baselines3 (and torch): pip install 'portal-shm[sb3]'") from _exc

# The method ``SubprocVecEnv`` attaches to each env it makes (see ``env_side``).
ENV_SIDE_COMMAND = "_portal_shm_sb3_command"


def env_side(env_fn: Callable[[], Any]) -> Callable[[], Any]:
    """``env_fn``, with the worker commands of SB3's ``SubprocVecEnv`` attached to the env it makes.

    ``env_is_wrapped`` needs ``isinstance`` on the env's wrapper chain, which only the env's own
    interpreter can run: the made env gets a method ``ENV_SIDE_COMMAND`` that the agent calls
    through ``call_envs`` with the wrapper class cloudpickled (an importable class travels as its
    name and is imported there, as it is for ``env_fn``). Environments that are not gymnasium
    envs (old ``gym`` ones) are converted as SB3's workers convert them.

    The factory is a closure on purpose: cloudpickle ships closures by value, so the env's runtime
    never imports this module, nor through it SB3 and torch.
    """
    command_name = ENV_SIDE_COMMAND

    def make_env() -> Any:
        import types

        import cloudpickle
        import gymnasium

        env = env_fn()
        if not isinstance(env, gymnasium.Env):
            from stable_baselines3.common.vec_env.patch_gym import _patch_env

            env = _patch_env(env)

        def command(self: Any, name: str, *args: Any) -> Any:
            if name == "is_wrapped":
                wrapper_class = cloudpickle.loads(args[0])
                layer = self
                while isinstance(layer, gymnasium.Wrapper):
                    if isinstance(layer, wrapper_class):
                        return True
                    layer = layer.env
                return False
            if name == "has_attr":
                try:
                    self.get_wrapper_attr(args[0])
                except AttributeError:
                    return False
                return True
            raise ValueError(f"unknown portal_shm.sb3 command {name!r}: the agent and the env side differ in version")

        setattr(env, command_name, types.MethodType(command, env))
        return env

    return make_env


class SubprocVecEnv(SB3VecEnv):
    """SB3's ``SubprocVecEnv``, on a portal: import it in its place, change nothing else.

    Args:
        env_fns: one env factory per env, as SB3 takes them (lambdas, closures, ``functools.partial``,
            ``make_vec_env``'s); cloudpickled to the env servers.
        start_method: checked as SB3 checks it (a ``multiprocessing`` start method, else
            ``ValueError: cannot find context for ...``) and otherwise without effect: env servers
            are always fresh processes, started by the portal's backend, never forked from the
            caller.
        portal_options: ``VectorPortal``'s options (``backend``, ``ring_depth``, ``step_timeout``,
            ``copy``, ...). ``envs_per_server`` defaults to 1: one process per env, as SB3 runs them
            (envs that share a process share its global RNGs). ``autoreset_mode`` can only be
            SAME_STEP, SB3's.

    As SB3's: per-env calls only in the envs ``indices`` names, ``actions[i]`` for env ``i`` for
    every action space, ``env_is_wrapped`` by ``isinstance`` in the env's process, ``seed()`` and
    ``set_options()`` for the next reset, ``render``/``get_images``, and rewards as float64 (SB3
    stacks the envs' Python floats). Unlike SB3's, an env's exception in ``env_method``,
    ``get_attr`` or ``set_attr`` raises here (an ``EnvError`` that is also the env's exception type)
    and the other envs stay usable: SB3's worker dies with it.
    """

    reward_dtype: type = np.float64

    def __init__(
        self, env_fns: Sequence[Callable[[], Any]], start_method: Optional[str] = None, **portal_options: Any
    ) -> None:
        if start_method is not None:
            multiprocessing.get_context(start_method)  # SB3's check, with its error
        self.start_method = start_method
        mode = portal_options.pop("autoreset_mode", AutoresetMode.SAME_STEP)
        if AutoresetMode(mode.value if isinstance(mode, AutoresetMode) else mode) != AutoresetMode.SAME_STEP:
            raise ValueError(
                f"SubprocVecEnv runs SB3's SAME_STEP autoreset, not {mode}: leave out autoreset_mode "
                "(SB3VecEnv(portal) takes a portal in any mode)"
            )
        portal_options.setdefault("envs_per_server", 1)
        portal = VectorPortal(
            [env_side(env_fn) for env_fn in env_fns], autoreset_mode=AutoresetMode.SAME_STEP, **portal_options
        )
        try:
            super().__init__(portal)
        except BaseException:
            portal.close()
            raise

    def has_attr(self, attr_name: str) -> bool:
        """Whether every env has the attribute (through its wrappers), its value never sent."""
        return all(self._per_env(None, lambda ids: self._calls.call_envs(ids, ENV_SIDE_COMMAND, "has_attr", attr_name)))

    def env_is_wrapped(self, wrapper_class: type, indices: Indices = None) -> list:
        """``isinstance`` against ``wrapper_class`` along each chosen env's wrapper chain, in its
        process (the class cloudpickled there; an importable one travels as its name)."""
        shipped = cloudpickle.dumps(wrapper_class)
        return self._per_env(indices, lambda ids: self._calls.call_envs(ids, ENV_SIDE_COMMAND, "is_wrapped", shipped))


def flat_agents_vec_env(
    env: str,
    num_envs: int = 1,
    group: Optional[str] = None,
    *,
    others: Optional[Callable[[Any], Any]] = None,
    copy: bool = False,
    **make_vec_ma_options: Any,
) -> SB3VecEnv:
    """One group's agents of ``num_envs`` PettingZoo envs as the envs of an SB3 ``VecEnv``
    (``num_envs * k`` of them): parameter sharing, as SuperSuit's ``pettingzoo_env_to_vec_env_v1``
    + ``concat_vec_envs_v1`` give SB3.

    ``SB3VecEnv(make_vec_ma(...).flat(group))`` with the envs in SB3's SAME_STEP autoreset mode;
    ``make_vec_ma_options`` are ``make_vec_ma``'s (``backend``, ``env_kwargs``, ``vector_kwargs``,
    ``dead_obs`` ...), ``group`` and ``others`` ``FlatAgents``'. Masked rows (agents that left) are
    rows with reward 0, their actions never reach the env; ``infos[i]["agent_mask"]`` says which
    acted. ``terminal_observation`` is an ended agent's real last observation whatever ``dead_obs``
    says, so SB3 bootstraps a time limit from it.
    """
    vector_kwargs = dict(make_vec_ma_options.pop("vector_kwargs", None) or {})
    mode = vector_kwargs.setdefault("autoreset_mode", AutoresetMode.SAME_STEP)
    if AutoresetMode(mode.value if isinstance(mode, AutoresetMode) else mode) != AutoresetMode.SAME_STEP:
        raise ValueError(f"SB3 runs SAME_STEP autoreset, not {mode}: leave autoreset_mode out of vector_kwargs")
    envs = make_vec_ma(env, num_envs, vector_kwargs=vector_kwargs, **make_vec_ma_options)
    try:
        return SB3VecEnv(envs.flat(group, others), copy=copy)
    except BaseException:
        envs.close()
        raise
