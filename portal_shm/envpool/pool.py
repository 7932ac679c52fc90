"""envpool's env object over a portal: one env's spaces, envpool's calls, infos and their dtypes."""

from __future__ import annotations

import collections
import dataclasses
from typing import Any, Optional

import gymnasium as gym
import numpy as np

from ..agent.contract.base import PortalVectorEnv
from .gym_spaces import import_gym, to_gym
from .tasks import ATARI_INFO_DTYPES, Task


@dataclasses.dataclass(frozen=True)
class PoolSpec:
    """What envpool's ``env.spec`` holds that scripts read: ``config`` (a named tuple), the spaces
    (the pool's own: gym's classes for ``env_type="gym"`` where gym is installed, else gymnasium's)."""

    id: str
    config: Any
    observation_space: Any
    action_space: Any
    reward_threshold: Optional[float] = None


class EnvPool:
    """envpool's env object over a portal: one env's spaces, envpool's calls, infos and dtypes.

    ``action_space``/``observation_space`` are one env's spaces, as envpool gives them (and so are
    ``single_*``; all four are plain attributes that scripts may overwrite). With ``env_type="gym"``
    they are the ``gym`` package's classes where gym is installed, as envpool 0.x gave them (scripts
    check ``isinstance(..., gym.spaces.Discrete)``), converted once here; else gymnasium's. The portal
    itself is ``self.portal`` (``stats()``, ``servers``).
    """

    def __init__(
        self, portal: PortalVectorEnv, spec: Task, env_type: str, config: dict, seed: Any, reshape: Optional[tuple]
    ) -> None:
        self.portal = portal
        self.task = spec
        self.env_type = env_type
        self.config = config
        self.num_envs = int(config["num_envs"])
        self.batch_size = int(config["batch_size"])
        self.is_async = self.batch_size < self.num_envs
        self.all_env_ids = np.arange(self.num_envs, dtype=np.int32)
        self.all_env_ids.flags.writeable = False  # handed out as info["env_id"]: what comes back as it is
        self._seed = seed  # handed to the first reset, as envpool seeds env i with seed + i at creation
        self._reshape = reshape  # (channels, h, w) when RGB frames are stacked as envpool's (3 * stack, h, w)
        single_obs, single_action = portal.single_observation_space, portal.single_action_space
        if reshape is not None:
            single_obs = gym.spaces.Box(0, 255, reshape, np.uint8)
        old_gym = import_gym() if env_type == "gym" else None
        if old_gym is not None:
            single_obs, single_action = to_gym(single_obs, old_gym), to_gym(single_action, old_gym)
        self.single_observation_space = self.observation_space = single_obs
        self.single_action_space = self.action_space = single_action
        self.spec = PoolSpec(
            spec.task_id, collections.namedtuple("Config", list(config))(**config), single_obs, self.action_space
        )
        self._pending: Optional[str] = None  # lockstep send/recv: "step" or "reset" in flight
        self._elapsed = np.zeros(self.num_envs, np.int32)  # ViZDoom: counted here (Atari: by the preset)
        self._ended = np.zeros(self.num_envs, bool)

    def __len__(self) -> int:
        return self.num_envs

    def __repr__(self) -> str:
        options = ", ".join(f"{key}={value!r}" for key, value in self.config.items())
        return f"portal_shm.envpool.EnvPool({self.task.task_id!r}, env_type={self.env_type!r}, {options})"

    # -- envpool's calls --------------------------------------------------------------------------
    def reset(self, env_id: Optional[np.ndarray] = None) -> Any:
        """Reset every env (``env_id`` must name all of them: the portal resets all at once) and return
        the first observations: ``(obs, info)``, or ``obs`` alone for ``env_type="gym"`` unless
        ``gym_reset_return_info=True``. With async batches, the first batch after an ``async_reset``."""
        self._check_all(env_id, "reset")
        if self.is_async:
            self.async_reset()
            obs, _, _, _, info = self.recv()
        else:
            obs, infos = self.portal.reset(seed=self._take_seed())
            self._ended[:] = True
            self._count_steps(self.all_env_ids, np.zeros(self.num_envs, bool))
            obs, info = self._obs(obs), self._info(infos, self.all_env_ids, None)
        if self.env_type == "gym" and not self.config["gym_reset_return_info"]:
            return obs
        return obs, info

    def step(self, action: Any, env_id: Optional[np.ndarray] = None) -> tuple:
        """``send(action, env_id)`` then ``recv()``: the next batch."""
        self.send(action, env_id)
        return self.recv()

    def send(self, action: Any, env_id: Optional[np.ndarray] = None) -> None:
        """Step the envs ``env_id`` (default: all, as envpool) with ``action`` (one per env) and return
        at once. With async batches ``env_id`` is usually the last ``recv``'s ``info["env_id"]``."""
        action = np.asarray(action)
        if not self.is_async:
            if env_id is self.all_env_ids:  # the last recv's info["env_id"] (read-only): every env, in order
                env_id = None
            self._check_all(env_id, "send")
            if env_id is not None:  # every env, maybe in another order: put the actions in env order
                order = np.empty(self.num_envs, np.intp)
                order[np.asarray(env_id, dtype=np.intp).reshape(-1)] = np.arange(self.num_envs)
                action = action[order]
            self._begin("step")
            self.portal.step_async(action)
            return
        ids = self.all_env_ids if env_id is None else np.asarray(env_id, dtype=np.int32).reshape(-1)
        self.portal.send(action, ids)

    def recv(self, reset: bool = False, return_info: bool = True) -> tuple:
        """The next batch: ``(obs, reward, terminated, truncated, info)`` (gymnasium) or ``(obs, reward,
        done, info)`` (gym); after ``async_reset``, the reset batches in the same form."""
        if not self.is_async:
            pending, self._pending = self._pending, None
            if pending is None:
                raise RuntimeError("recv() without a send() or async_reset() before it")
            if pending == "reset":
                obs, infos = self.portal.reset_wait()
                size = self.num_envs
                reward, terminated, truncated = np.zeros(size), np.zeros(size, bool), np.zeros(size, bool)
            else:
                obs, reward, terminated, truncated, infos = self.portal.step_wait()
            ids = self.all_env_ids
        else:
            obs, reward, terminated, truncated, infos = self.portal.recv()
            ids = np.asarray(infos["env_id"], dtype=np.int32)
        self._count_steps(ids, terminated | truncated)
        info = self._info(infos, ids, truncated)
        obs, reward = self._obs(obs), np.asarray(reward, dtype=np.float32)
        if self.env_type == "gym":
            return obs, reward, terminated | truncated, info
        return obs, reward, terminated, truncated, info

    def async_reset(self) -> None:
        """Reset every env; ``recv()`` then hands out the reset observations batch by batch."""
        self._ended[:] = True  # the envs' next results are reset observations: elapsed_step 0
        if self.is_async:
            self.portal.async_reset(seed=self._take_seed())
        else:
            self._begin("reset")
            self.portal.reset_async(seed=self._take_seed())

    def close(self) -> None:
        self.portal.close()

    def seed(self, seed: Any = None) -> None:
        """Refused, as envpool ignores it: the seed is ``make``'s (env ``i`` gets ``seed + i``)."""
        raise RuntimeError("seed() does not reseed envpool envs: pass seed= to portal_shm.envpool.make(...)")

    def xla(self) -> Any:
        """Refused: envpool's XLA handle (send/recv inside ``jax.jit``) needs its C++ pool in the
        agent's own process, and these envs live in other processes."""
        raise RuntimeError(
            "xla() is not available: the envs live in env servers, not in this process, so there is no "
            "XLA custom call to step them from inside jax.jit. Step them from Python (envs.send/envs.recv "
            "or envs.step between jitted policy calls), as envpool's non-XLA loops do"
        )

    def __enter__(self) -> EnvPool:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- helpers ----------------------------------------------------------------------------------
    def _take_seed(self) -> Any:
        seed, self._seed = self._seed, None
        return seed

    def _begin(self, what: str) -> None:
        if self._pending is not None:
            raise RuntimeError(f"{what}: a {self._pending} is in flight; recv() it first")
        self._pending = what

    def _check_all(self, env_id: Any, what: str) -> None:
        if env_id is None:
            return
        ids = np.sort(np.asarray(env_id).reshape(-1))
        if ids.shape != (self.num_envs,) or not np.array_equal(ids, self.all_env_ids):
            mode = "" if self.is_async else " in lockstep (batch_size == num_envs)"
            raise ValueError(
                f"{what}(env_id={np.asarray(env_id).tolist()}){mode} must name every env: the portal "
                f"{'resets' if what == 'reset' else 'steps'} all {self.num_envs} at once; for some envs at a "
                "time make the pool with batch_size < num_envs and use send/recv"
            )

    def _obs(self, obs: np.ndarray) -> np.ndarray:
        if self._reshape is None:
            return obs
        return obs.reshape((obs.shape[0],) + self._reshape)

    def _count_steps(self, ids: np.ndarray, ended: np.ndarray) -> None:
        """ViZDoom's ``elapsed_step`` (Atari's comes from the preset): 0 on the reset that follows an
        episode's end (autoreset, NextStep) or a reset, one more on every other step."""
        if self.task.family == "atari":
            return
        self._elapsed[ids] = np.where(self._ended[ids], 0, self._elapsed[ids] + 1)
        self._ended[ids] = ended

    def _info(self, infos: dict, ids: np.ndarray, truncated: Optional[np.ndarray]) -> dict:
        """envpool's info dict: ``env_id``, ``players``, then the task's keys in envpool's dtypes."""
        info: dict[str, Any] = {"env_id": ids, "players": {"env_id": ids}}
        if self.task.family == "atari":
            for key, dtype in ATARI_INFO_DTYPES.items():
                info[key] = np.asarray(infos[key], dtype=dtype) if key in infos else np.zeros(len(ids), dtype)
        else:
            for key, value in infos.items():
                if not key.startswith("_") and key != "env_id":
                    info[key] = value
            info["elapsed_step"] = self._elapsed[ids]
        if self.env_type == "gym":
            info["TimeLimit.truncated"] = np.zeros(len(ids), bool) if truncated is None else np.asarray(truncated)
        return info
