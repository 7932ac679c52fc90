"""ALE's own vector env (ale_py >= 0.10 ``AtariVectorEnv``) hosting a server's Atari envs: frame
skip, max-pool, grey, resize and frame stack in its C++ threads, one call per step for all of them.

``atari_batch`` takes ``presets.atari``'s options and gives an ``AleBatch``, or the reason it cannot
(no ``AtariVectorEnv`` in this runtime, or an option it has no equivalent for): the caller then
makes per-env presets. The results are ``AtariVectorEnv``'s, equal to it in-process with the same
settings and seeds (tests/integration/test_native_ale.py); they differ from the numpy preset's
where the two differ (the resize's rounding, how the no-ops are drawn).

Python 3.9 syntax: this runs in env runtimes.
"""

from __future__ import annotations

import os
from typing import List, Optional, Sequence, Tuple, Union

import numpy as np

from ..wire.ale_settings import vector_settings
from .native import Columns, NativeBatch


def _ale_seed(seed: Optional[int]) -> int:
    """A seed as ALE's vector env takes it: a 31-bit int as it is, -1 for none, and any other int
    (a restart's seed, a user's 64-bit seed) folded into 31 bits by a ``SeedSequence``."""
    if seed is None:
        return -1
    seed = int(seed)
    if 0 <= seed < 2**31:
        return seed
    return int(np.random.SeedSequence(abs(seed)).generate_state(1)[0] >> 1)


class AleBatch(NativeBatch):
    """A server's Atari envs in one ``AtariVectorEnv`` of ``num_threads`` threads (0: the cores this
    process may run on shared among the ``num_servers`` servers there, at least one; at most one
    per env)."""

    name = "ale_py.AtariVectorEnv"

    def __init__(
        self,
        num_envs: int,
        settings: dict,
        reward_clip: bool,
        envpool_infos: bool,
        num_threads: int = 0,
        num_servers: int = 1,
    ) -> None:
        from ale_py.vector_env import AtariVectorEnv

        if num_threads <= 0:
            cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
            num_threads = max(1, cores // num_servers)
        num_threads = min(num_threads, num_envs)  # (a thread more than the envs would only wait)
        self.num_threads = num_threads

        self._make = lambda mode: AtariVectorEnv(
            num_envs=num_envs, num_threads=num_threads, autoreset_mode=mode, **settings
        )
        self.vector = self._make("NextStep")
        self.mode = "NextStep"
        self.num_envs = num_envs
        self.settings = settings
        self.reward_clip = reward_clip
        self.envpool_infos = envpool_infos
        self.episodic_life = settings["episodic_life"]
        self.single_observation_space = self.vector.single_observation_space
        self.single_action_space = self.vector.single_action_space
        self.metadata = {"autoreset_mode": "NextStep", "render_modes": []}
        self.elapsed = np.zeros(num_envs, np.int64)
        self.paddles = [1.0] * num_envs
        self.ended = np.zeros(num_envs, bool)

    def configure(self, autoreset_mode: str) -> None:
        mode = "SameStep" if autoreset_mode == "SameStep" else "NextStep"  # Disabled: the server refuses
        if mode != self.mode:
            self.vector.close()
            self.vector, self.mode = self._make(mode), mode

    def reset(self, indices: np.ndarray, seeds: Sequence[Optional[int]]) -> Tuple[np.ndarray, List[dict]]:
        seed = np.array([_ale_seed(s) for s in seeds], np.int64)
        if len(indices) == self.num_envs:
            obs, info = self.vector.reset(seed=seed)
        else:
            mask = np.zeros(self.num_envs, bool)
            mask[indices] = True
            obs, info = self.vector.reset(seed=seed, options={"reset_mask": mask})
        self.elapsed[indices] = 0
        self.ended[indices] = False
        zeros = np.zeros(self.num_envs, np.float32)
        rows = self._columns(info, zeros, np.zeros(self.num_envs, bool), {}).per_env(self.num_envs)
        return obs, [rows[j][0] for j in indices]

    def step(self, actions: np.ndarray) -> Tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, Columns]:
        # AtariVectorEnv.send's call, less its checks; lists, which ALE's binding reads faster than arrays
        self.vector.ale.send(actions.tolist(), self.paddles)
        obs, reward, terminated, truncated, info = self.vector.ale.recv()
        self.stepped()
        self.elapsed += 1
        if self.mode == "NextStep":  # the step after an episode's end was its reset
            self.elapsed[self.ended] = 0
        ended = terminated | truncated
        final_obs = info.pop("final_obs", None)
        extras = {}
        if final_obs is not None and ended.any():  # SameStep: the other infos are the new episode's
            for j in np.flatnonzero(ended):
                final = {"elapsed_step": int(self.elapsed[j])} if self.envpool_infos else {}
                extras[int(j)] = [{"final_obs": final_obs[j], "final_info": final}]
                self.elapsed[j] = 0
        self.ended = ended
        columns = self._columns(info, reward, terminated, extras)
        if self.reward_clip:
            reward = np.sign(reward)
        return obs, reward, terminated, truncated, columns

    def _columns(self, info: dict, reward: np.ndarray, terminated: np.ndarray, extras: dict) -> Columns:
        if self.envpool_infos:
            game_over = terminated & (info["lives"] == 0) if self.episodic_life else terminated
            columns = {
                "lives": info["lives"].tolist(),
                "reward": reward.astype(float).tolist(),
                "terminated": game_over.astype(int).tolist(),
                "elapsed_step": self.elapsed.tolist(),
            }
        else:
            columns = {
                "lives": info["lives"].tolist(),
                "episode_frame_number": info["episode_frame_number"].tolist(),
                "frame_number": info["frame_number"].tolist(),
            }
        return Columns(columns, extras)

    def close(self) -> None:
        self.vector.close()


def atari_batch(num_envs: int, env_id: str, num_threads: int, num_servers: int, options: dict) -> Union[AleBatch, str]:
    """An ``AleBatch`` for ``presets.atari``'s options, or why there is none here."""
    try:
        import ale_py.vector_env  # noqa: F401
    except ImportError:
        return "this runtime's ale_py has no AtariVectorEnv (ale_py >= 0.10 has)"
    settings = vector_settings(env_id, options)
    if isinstance(settings, str):
        return settings
    return AleBatch(
        num_envs,
        settings,
        bool(options.get("reward_clip", False)),
        bool(options.get("envpool_infos", False)),
        num_threads,
        num_servers,
    )
