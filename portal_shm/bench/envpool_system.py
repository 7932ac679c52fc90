"""envpool as a benchmark system: its Atari tasks, set up to match gymnasium's ``ALE/*-v5``.

envpool steps its envs in C++ threads inside the agent's own process (no isolation). By default
its Atari observation is preprocessed (84x84 grayscale, 4 stacked frames, episodic life, clipped
reward); here it is configured for the raw 210x160 RGB frame of ``ALE/Pong-v5`` with v5's
frameskip 4 and sticky actions 0.25, so the work per step is comparable. What still differs is
stated by :func:`differences` and lands in the report's notes.
"""

from __future__ import annotations

from typing import Any, Optional

import numpy as np

from .options import BenchOptions
from .scenarios import Scenario

# gymnasium ALE v5 defaults, in envpool's words.
ALE_V5_CONFIG = dict(
    img_height=210,
    img_width=160,
    gray_scale=False,
    stack_num=1,
    frame_skip=4,
    repeat_action_probability=0.25,
    episodic_life=False,
    reward_clip=False,
    noop_max=1,
    use_fire_reset=False,
    full_action_space=False,
    max_episode_steps=27000,
)


def unsupported(sc: Scenario) -> Optional[str]:
    if sc.is_null:
        return "envpool has no null env (its envs are compiled in C++); transport cost is not comparable"
    if sc.envpool_task() is None:
        return (
            f"no envpool counterpart wired for {sc.name}: the harness maps ALE/<Game>-v5 only "
            "(envpool's ViZDoom tasks render other frames and hung at start-up on the 2-core machine)"
        )
    return None


def differences(sc: Scenario) -> Optional[str]:
    if unsupported(sc) is not None:
        return None
    if sc.is_training:
        return (
            f"envpool {sc.envpool_task()} with its defaults (84x84 grey, stack 4, FIRE and no-ops at reset, no sticky "
            "actions): its envs run as threads inside the agent process, no isolation"
        )
    return (
        f"envpool {sc.envpool_task()}: set to 210x160 RGB, frameskip 4, sticky actions 0.25, no episodic "
        "life, no reward clipping, no noops, as ALE v5; it still max-pools the last two frames of each "
        "frameskip, returns channel-first (3, 210, 160) frames, runs its envs as threads inside the agent "
        "process (its agent CPU share counts them) and has no isolation"
    )


class EnvpoolVector:
    """envpool's gymnasium-style env with the vector API the harness steps (lockstep), plus
    ``send``/``recv`` for async batches when ``options.batch_size`` is set."""

    def __init__(self, sc: Scenario, n: int, options: BenchOptions) -> None:
        import envpool
        import gymnasium as gym

        reason = unsupported(sc)
        if reason:
            raise ValueError(reason)
        self.num_envs = n
        self.batch_size = options.batch_size or n
        self._env = envpool.make(
            sc.envpool_task(),
            env_type="gymnasium",
            num_envs=n,
            batch_size=self.batch_size,
            seed=options.seed,
            **({} if sc.is_training else ALE_V5_CONFIG),
        )
        self.single_action_space = gym.spaces.Discrete(int(self._env.action_space.n))
        self.single_observation_space = self._env.observation_space
        self.action_space = gym.vector.utils.batch_space(self.single_action_space, n)
        self.observation_space = gym.vector.utils.batch_space(self.single_observation_space, n)
        self.config = dict(self._env.spec.config._asdict())

    def reset(self, seed: Any = None, options: Any = None) -> tuple:
        if self.batch_size < self.num_envs:  # async batches start with async_reset; a sync reset would
            return None, {}  # leave envs in flight that async_reset then refuses
        return self._env.reset()  # envpool seeds at construction (seed=options.seed)

    def step(self, actions: Any) -> tuple:
        return self._env.step(np.asarray(actions))

    def async_reset(self) -> None:
        self._env.async_reset()

    def send(self, actions: Any, env_ids: Any) -> None:
        self._env.send(np.asarray(actions), np.asarray(env_ids, dtype=np.int32))

    def recv(self) -> tuple:
        return self._env.recv()

    def close(self) -> None:
        self._env.close()
