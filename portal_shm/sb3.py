"""Stable-Baselines3 on a VectorPortal: ``SB3VecEnv(portal)`` is an SB3 ``VecEnv``.

```python
import portal_shm
from portal_shm.sb3 import SB3VecEnv
from stable_baselines3 import PPO
from stable_baselines3.common.vec_env import VecMonitor

portal = portal_shm.make_vec("ALE/Pong-v5", 8, backend="docker", image="portal-shm/ale",
                             vector_kwargs={"autoreset_mode": "SameStep"})
model = PPO("CnnPolicy", VecMonitor(SB3VecEnv(portal)))
```

SB3 resets an env in the same ``step`` that ended its episode and hands the last observation of
the episode over as ``infos[i]["terminal_observation"]``: that is gymnasium's SAME_STEP autoreset,
so the portal must be made with ``autoreset_mode="SameStep"``. Infos become SB3's list of per-env
dicts, with ``"TimeLimit.truncated"`` set as SB3's own VecEnvs set it, and the infos of the resets
in ``reset_infos``.

Zero copy and how long observations stay valid: the observations ``reset``/``step_wait`` return
are views of the portal's shared-memory ring (unless ``copy=True``), valid until
``ring_depth - 1`` further steps (4 by default: 3 steps). SB3's algorithms hold an observation for
one step (``_last_obs``) and copy it into their rollout or replay buffer, so views are enough for
them; a callback or wrapper that keeps observations longer must copy them (or pass ``copy=True``).
Terminal observations are always fresh arrays: SB3 keeps them in the infos.
"""

from __future__ import annotations

import contextlib
import re
from typing import Any, Iterable, Iterator, Optional, Sequence, Union

import numpy as np
from gymnasium.vector import AutoresetMode, VectorEnv

from .errors import EnvError

try:
    from stable_baselines3.common.vec_env.base_vec_env import VecEnv, VecEnvObs, VecEnvStepReturn
except ImportError as _exc:  # pragma: no cover - depends on the installation
    raise ImportError("portal_shm.sb3 needs stable-baselines3 (and torch): pip install 'portal-shm[sb3]'") from _exc

Indices = Union[None, int, Iterable[int]]


def unbatch_infos(infos: dict, num_envs: int) -> list:
    """Gymnasium's vector infos (dict of arrays with ``_key`` masks) as one dict per env.

    Numpy scalars become Python numbers, as SB3's own VecEnvs (which never batch infos) give them.
    """
    per_env: list = [{} for _ in range(num_envs)]
    for key, value in infos.items():
        if key.startswith("_") and key[1:] in infos:
            continue  # a mask
        mask = infos.get("_" + key)
        present = range(num_envs) if mask is None else np.flatnonzero(mask)
        if isinstance(value, dict):
            nested = unbatch_infos(value, num_envs)
            for i in present:
                per_env[i][key] = nested[i]
            continue
        for i in present:
            item = value[i]
            per_env[i][key] = item.item() if isinstance(item, np.generic) else item
    return per_env


def wrapper_names(description: str) -> list:
    """Wrapper class names, outermost first, in a gymnasium env's ``repr``.

    Wrappers print ``<Name<inner>>``; the env itself ``<EnvClass<env-id>>`` when it has a spec,
    else ``<EnvClass instance>``.
    """
    names = re.findall(r"<([^<>\s]+)", description)
    innermost = 1 if re.search(r" instance>+$", description.strip()) else 2
    return names[:-innermost] if len(names) > innermost else []


class SB3VecEnv(VecEnv):
    """A gymnasium ``VectorEnv`` in SAME_STEP autoreset mode (a VectorPortal) as an SB3 ``VecEnv``.

    Args:
        venv: the portal, made with ``vector_kwargs={"autoreset_mode": "SameStep"}``. Any gymnasium
            vector env in that mode works (``SyncVectorEnv`` too), which is how the tests compare.
        copy: return fresh observation arrays instead of ring views (see the module docstring).

    Per-env calls: a VectorPortal's ``call`` always addresses every env, so ``env_method`` with
    ``indices`` runs the method in every env and returns the chosen envs' results (right for pure
    methods such as HER's ``compute_reward``, not for methods with side effects); ``set_attr``
    with ``indices`` reads the attribute of every env and writes back their values with the
    chosen ones replaced. Results and values travel as msgpack: numbers, strings, arrays, lists,
    dicts.
    """

    def __init__(self, venv: VectorEnv, copy: bool = False) -> None:
        mode = venv.metadata.get("autoreset_mode")
        if mode != AutoresetMode.SAME_STEP and mode != AutoresetMode.SAME_STEP.value:
            raise ValueError(
                f"SB3VecEnv needs a vector env in SAME_STEP autoreset mode (SB3 resets in the step that ends "
                f"an episode), this one is in {mode}: make it with "
                "make_vec(..., vector_kwargs={'autoreset_mode': 'SameStep'})"
            )
        self.venv = venv
        self.copy = copy
        self._actions: Optional[np.ndarray] = None
        super().__init__(venv.num_envs, venv.single_observation_space, venv.single_action_space)

    # -- stepping ------------------------------------------------------------------------
    def reset(self) -> VecEnvObs:
        """Reset every env with the seeds of ``seed()`` and the options of ``set_options()``, once."""
        seeds = list(self._seeds) if any(seed is not None for seed in self._seeds) else None
        obs, infos = self.venv.reset(seed=seeds, options=self._common_options())
        self.reset_infos = unbatch_infos(infos, self.num_envs)
        self._reset_seeds()
        self._reset_options()
        return self._obs(obs)

    def _common_options(self) -> Optional[dict]:
        first = self._options[0]
        if any(options != first for options in self._options[1:]):
            raise ValueError(
                "a VectorPortal resets all its envs with one options dict; set_options() gave different options per env"
            )
        return dict(first) if first else None

    def step_async(self, actions: np.ndarray) -> None:
        if hasattr(self.venv, "step_async"):
            self.venv.step_async(actions)
        else:  # gymnasium's SyncVectorEnv steps in step_wait
            self._actions = actions

    def step_wait(self) -> VecEnvStepReturn:
        if self._actions is not None:
            actions, self._actions = self._actions, None
            obs, rewards, terminated, truncated, infos = self.venv.step(actions)
        else:
            obs, rewards, terminated, truncated, infos = self.venv.step_wait()
        dones = np.logical_or(terminated, truncated)
        per_env = unbatch_infos(infos, self.num_envs)
        for i in np.flatnonzero(dones):
            reset_info = per_env[i]
            final_info = reset_info.pop("final_info", {})
            final_obs = reset_info.pop("final_obs", None)
            self.reset_infos[i] = reset_info
            final_info["terminal_observation"] = _fresh(final_obs)
            per_env[i] = final_info
        time_limited = np.logical_and(truncated, np.logical_not(terminated)).tolist()
        for info, truncation in zip(per_env, time_limited):
            info["TimeLimit.truncated"] = truncation
        return self._obs(obs), np.asarray(rewards, dtype=np.float32), dones, per_env

    def _obs(self, obs: Any) -> VecEnvObs:
        return _fresh(obs) if self.copy else obs

    def close(self) -> None:
        self.venv.close()

    # -- attributes and methods of the envs ----------------------------------------------
    def _indices(self, indices: Indices) -> list:
        if indices is None:
            return list(range(self.num_envs))
        if isinstance(indices, (int, np.integer)):
            return [int(indices)]
        return [int(i) for i in indices]

    def get_attr(self, attr_name: str, indices: Indices = None) -> list:
        """The attribute of the chosen envs; an attribute an env lacks raises ``AttributeError``."""
        with _attribute_errors():
            values = self.venv.get_attr(attr_name)
        return [values[i] for i in self._indices(indices)]

    def set_attr(self, attr_name: str, value: Any, indices: Indices = None) -> None:
        chosen = self._indices(indices)
        if sorted(chosen) == list(range(self.num_envs)):
            values = [value] * self.num_envs
        else:
            with _attribute_errors():
                values = list(self.venv.get_attr(attr_name))
            for i in chosen:
                values[i] = value
        with _attribute_errors():
            self.venv.set_attr(attr_name, values)

    def env_method(self, method_name: str, *method_args: Any, indices: Indices = None, **method_kwargs: Any) -> list:
        """Results of ``method_name`` of the chosen envs (it runs in every env: see the class docstring)."""
        with _attribute_errors():
            results = self.venv.call(method_name, *method_args, **method_kwargs)
        return [results[i] for i in self._indices(indices)]

    def env_is_wrapped(self, wrapper_class: type, indices: Indices = None) -> list:
        """Whether each chosen env has a wrapper of that class name in its runtime.

        The env lives in another interpreter, so the class itself cannot be compared: the wrapper
        chain is read from the env's ``repr`` (gymnasium wrappers print ``<Name<...>>``).
        """
        descriptions = self.venv.call("__repr__")
        name = wrapper_class.__name__
        return [name in wrapper_names(str(descriptions[i])) for i in self._indices(indices)]

    def get_images(self) -> Sequence[Optional[np.ndarray]]:
        """Each env's ``render()`` (envs made with ``render_mode="rgb_array"``)."""
        return list(self.venv.render() or [None] * self.num_envs)


def _fresh(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return np.array(value)
    if isinstance(value, dict):
        return {key: _fresh(item) for key, item in value.items()}
    if isinstance(value, tuple):
        return tuple(_fresh(item) for item in value)
    return value


@contextlib.contextmanager
def _attribute_errors() -> Iterator[None]:
    """An env's ``AttributeError`` raised here as one: SB3's ``has_attr`` and its constructor catch it."""
    try:
        yield
    except EnvError as exc:
        if exc.error_type == "AttributeError":
            raise AttributeError(str(exc)) from exc
        raise
