"""``SB3VecEnv``: a gymnasium vector env (a portal of any kind) as a Stable-Baselines3 ``VecEnv``.

SB3 and gymnasium differ in how a batch looks, and this is where one becomes the other: infos as
one dict per env (``unbatch_infos``), SB3's per-env actions as gymnasium's batch
(``batch_actions``), SB3's SAME_STEP autoreset made from any mode, terminal observations as fresh
arrays, per-env calls only in the envs SB3's ``indices`` name, and an env's ``AttributeError``
raised as SB3 catches it. ``portal_shm.sb3`` (its module docstring says how to use it) builds its
``SubprocVecEnv`` on this class.
"""

from __future__ import annotations

import contextlib
import operator
import re
import warnings
from typing import Any, Callable, Iterable, Iterator, Optional, Sequence, Union

import numpy as np
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import concatenate, create_empty_array

from .agent.contract.infos import split_infos
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
    return split_infos(infos, num_envs, plain=True, unmasked=True)


def wrapper_names(description: str) -> list:
    """Wrapper class names, outermost first, in a gymnasium env's ``repr``.

    Wrappers print ``<Name<inner>>``; the env itself ``<EnvClass<env-id>>`` when it has a spec,
    else ``<EnvClass instance>``.
    """
    names = re.findall(r"<([^<>\s]+)", description)
    innermost = 1 if re.search(r" instance>+$", description.strip()) else 2
    return names[:-innermost] if len(names) > innermost else []


def batch_actions(space: spaces.Space, actions: Any, num_envs: int) -> Any:
    """SB3's actions (anything whose item ``i`` is env ``i``'s action) as gymnasium's batch.

    SB3's own ``SubprocVecEnv`` sends ``actions[i]`` to env ``i``, so its tests and users pass lists
    such as ``[space.sample() for _ in range(n)]``, also for ``Dict`` and ``Tuple`` spaces, whose
    gymnasium batch is a dict or tuple of arrays instead. A numeric array is already a batch; so
    is a dict for a ``Dict`` space (gymnasium's layout, accepted as well).
    """
    if isinstance(actions, np.ndarray) and actions.dtype != object:
        return actions
    if isinstance(space, spaces.Dict) and isinstance(actions, dict):
        return actions
    items = list(actions)
    if len(items) != num_envs:
        raise ValueError(
            f"got {len(items)} actions for {num_envs} envs: pass one action per env (actions[i] for env i)"
        )
    return concatenate(space, items, create_empty_array(space, num_envs))


class SB3VecEnv(VecEnv):
    """A gymnasium ``VectorEnv`` (a VectorPortal, any kind) as an SB3 ``VecEnv``.

    Args:
        venv: the portal. SAME_STEP autoreset (``vector_kwargs={"autoreset_mode": "SameStep"}``) is
            SB3's own; in NEXT_STEP or DISABLED mode the ended envs are reset here, within the step
            that ended them. Gymnasium's ``SyncVectorEnv`` works too, which is how the tests compare.
        copy: return fresh observation arrays instead of what the portal returns (see
            ``portal_shm.sb3``'s module docstring).

    Per-env calls run only in the envs ``indices`` names, as in SB3's ``SubprocVecEnv``: an index
    as SB3 takes it (None for all, an int, or an iterable; negative ones count from the end; one
    named twice runs twice). ``set_attr`` sets the attribute on the outermost wrapper
    (``setattr(env, ...)``, as SB3's workers do; gymnasium's ``set_wrapper_attr`` would set it
    in the inner env that has it). Results and values travel as msgpack: numbers, strings, bytes,
    arrays, lists, dicts. An env's exception in a call raises there (``EnvError``, also the env's
    exception type) and leaves the portal usable.
    """

    reward_dtype: type = np.float32  # DummyVecEnv's

    def __init__(self, venv: VectorEnv, copy: bool = False) -> None:
        mode = venv.metadata.get("autoreset_mode", AutoresetMode.NEXT_STEP)
        self.autoreset_mode = AutoresetMode(mode.value if isinstance(mode, AutoresetMode) else mode)
        self.venv = venv
        self.copy = copy
        self.closed = False
        if hasattr(venv, "call_envs"):
            self._calls: Any = venv
        elif hasattr(venv, "envs"):
            self._calls = _LocalEnvs(venv.envs)
        else:
            raise TypeError(
                f"SB3VecEnv needs a vector env with per-env calls (a portal, or one holding its envs in "
                f"`envs` as SyncVectorEnv does); {type(venv).__name__} has neither"
            )
        self._actions: Optional[Any] = None
        super().__init__(venv.num_envs, venv.single_observation_space, venv.single_action_space)

    # -- stepping ------------------------------------------------------------------------
    def reset(self) -> VecEnvObs:
        """Reset every env with the seeds of ``seed()`` and the options of ``set_options()``, once.

        The portal takes one options dict per reset: envs with different options are reset in
        groups (``options["reset_mask"]``), each env once. An env whose options are empty while
        other envs' are not gets ``options={}`` where SB3 passes none.
        """
        seeds = list(self._seeds) if any(seed is not None for seed in self._seeds) else None
        groups: list = []
        for i, options in enumerate(self._options):
            for group_options, members in groups:
                if group_options == options:
                    members.append(i)
                    break
            else:
                groups.append((options, [i]))
        if len(groups) == 1:
            options = groups[0][0]
            obs, infos = self.venv.reset(seed=seeds, options=dict(options) if options else None)
            self.reset_infos = unbatch_infos(infos, self.num_envs)
        else:
            self.reset_infos = [{} for _ in range(self.num_envs)]
            for options, members in groups:
                mask = np.zeros(self.num_envs, dtype=np.bool_)
                mask[members] = True
                obs, infos = self.venv.reset(seed=seeds, options={**options, "reset_mask": mask})
                per_env = unbatch_infos(infos, self.num_envs)
                for i in members:
                    self.reset_infos[i] = per_env[i]
        self._reset_seeds()
        self._reset_options()
        return self._obs(obs)

    def step_async(self, actions: Any) -> None:
        actions = batch_actions(self.venv.single_action_space, actions, self.num_envs)
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
        ended = np.flatnonzero(dones)
        if self.autoreset_mode == AutoresetMode.SAME_STEP:
            for i in ended:
                reset_info = per_env[i]
                final_info = reset_info.pop("final_info", {})
                final_obs = reset_info.pop("final_obs", None)
                self.reset_infos[i] = reset_info
                final_info["terminal_observation"] = _fresh(final_obs)
                per_env[i] = final_info
        elif ended.size:
            final_obs = _fresh(obs)
            obs, infos = self.venv.reset(options={"reset_mask": np.array(dones, dtype=np.bool_)})
            reset_infos = unbatch_infos(infos, self.num_envs)
            for i in ended:
                per_env[i]["terminal_observation"] = _row(final_obs, i)
                self.reset_infos[i] = reset_infos[i]
        time_limited = np.logical_and(truncated, np.logical_not(terminated)).tolist()
        for info, truncation in zip(per_env, time_limited):
            info["TimeLimit.truncated"] = truncation
        return self._obs(obs), np.asarray(rewards, dtype=self.reward_dtype), dones, per_env

    def _obs(self, obs: Any) -> VecEnvObs:
        return _fresh(obs) if self.copy else obs

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.venv.close()

    # -- attributes and methods of the envs ----------------------------------------------
    def env_ids(self, indices: Indices) -> list:
        """SB3's ``indices`` as env indices: None for all, an int, or an iterable of ints, each
        taken as Python takes a list index (``-1`` is the last env)."""
        if indices is None:
            return list(range(self.num_envs))
        if isinstance(indices, (int, np.integer)):
            indices = [indices]
        ids = []
        for index in indices:
            i = operator.index(index)
            if not -self.num_envs <= i < self.num_envs:
                raise IndexError(f"env index {i} is out of range: this VecEnv has {self.num_envs} envs")
            ids.append(i % self.num_envs)
        return ids

    def _per_env(self, indices: Indices, run: Callable[[list], Sequence[Any]]) -> list:
        """``run`` over the envs ``indices`` names, results in their order; an env named twice
        runs twice (in a later round: a portal call names each env at most once)."""
        ids = self.env_ids(indices)
        results: list = [None] * len(ids)
        pending = list(range(len(ids)))
        while pending:
            chosen: dict = {}
            later = []
            for position in pending:
                if ids[position] in chosen:
                    later.append(position)
                else:
                    chosen[ids[position]] = position
            for position, result in zip(chosen.values(), run(list(chosen))):
                results[position] = result
            pending = later
        return results

    def get_attr(self, attr_name: str, indices: Indices = None) -> list:
        """The attribute of the chosen envs; an attribute an env lacks raises ``AttributeError``."""
        with _attribute_errors():
            return self._per_env(indices, lambda ids: self._calls.get_attr_envs(ids, attr_name))

    def set_attr(self, attr_name: str, value: Any, indices: Indices = None) -> None:
        """Set the attribute on the chosen envs' outermost wrapper, as SB3's ``SubprocVecEnv`` does."""
        with _attribute_errors():
            self._per_env(indices, lambda ids: self._calls.call_envs(ids, "__setattr__", attr_name, value))

    def env_method(self, method_name: str, *method_args: Any, indices: Indices = None, **method_kwargs: Any) -> list:
        """Results of ``method_name`` in the chosen envs, which alone run it."""
        with _attribute_errors():
            return self._per_env(
                indices, lambda ids: self._calls.call_envs(ids, method_name, *method_args, **method_kwargs)
            )

    def env_is_wrapped(self, wrapper_class: type, indices: Indices = None) -> list:
        """Whether each chosen env has a wrapper of that class name in its runtime.

        A portal made elsewhere may live in an interpreter that cannot import the class, so it is
        not compared: the wrapper chain is read from the env's ``repr`` (gymnasium wrappers print
        ``<Name<...>>``). ``SubprocVecEnv``, which makes its envs, checks ``isinstance`` there.
        """
        name = wrapper_class.__name__
        descriptions = self._per_env(indices, lambda ids: self._calls.call_envs(ids, "__repr__"))
        return [name in wrapper_names(str(description)) for description in descriptions]

    def get_images(self) -> Sequence[Optional[np.ndarray]]:
        """Each env's ``render()``; as SB3's ``SubprocVecEnv``, ``None`` each (with a warning)
        unless the envs render ``rgb_array``."""
        if self.render_mode != "rgb_array":
            warnings.warn(
                f"The render mode is {self.render_mode}, but this method assumes it is `rgb_array` to obtain images."
            )
            return [None] * self.num_envs
        return list(self.venv.render() or [None] * self.num_envs)


class _LocalEnvs:
    """Per-env calls on a vector env that holds its envs in this process (gymnasium's SyncVectorEnv)."""

    def __init__(self, envs: Sequence[Any]) -> None:
        self.envs = envs

    def call_envs(self, env_ids: Sequence[int], name: str, *args: Any, **kwargs: Any) -> tuple:
        results = []
        for i in env_ids:
            attr = self.envs[i].get_wrapper_attr(name)
            results.append(attr(*args, **kwargs) if callable(attr) else attr)
        return tuple(results)

    def get_attr_envs(self, env_ids: Sequence[int], name: str) -> tuple:
        return tuple(self.envs[i].get_wrapper_attr(name) for i in env_ids)


def _row(value: Any, i: int) -> Any:
    """Env ``i``'s part of a batched observation (arrays, dicts and tuples of them)."""
    if isinstance(value, dict):
        return {key: _row(item, i) for key, item in value.items()}
    if isinstance(value, tuple):
        return tuple(_row(item, i) for item in value)
    return np.array(value[i])


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
        if exc.error_type == "AttributeError" and not isinstance(exc, AttributeError):
            raise AttributeError(str(exc)) from exc
        raise
