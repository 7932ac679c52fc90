"""Plain gymnasium envs for the tests of env states and recycling (tests/unit/server/test_episode_end_state.py,
tests/integration/test_recycle_plain.py): no ``get_state``, no
adapter, their randomness only from generators they and their wrappers hold, as most envs are.

``plain_walk`` stacks a ``PlainWalkEnv`` (its start, noise and episode length from
``self.np_random``, gusts from a ``random.Random`` of its own) under ``TimeLimit``,
``OrderEnforcing`` and ``NoisyObservation`` (noise from a generator of its own and from the env's
``np_random``, a bonus from a ``random.Random``). ``opaque_walk`` adds ``Tally``, a wrapper whose
state is an object no env state can carry: what recycling still swaps without states.
``crashing_walk`` adds ``CrashOnToken``: its process exits in a reset, or in an episode's first
step, when a token file exists (tests/integration/test_restart_exact.py picks the moment by
writing it); without a token it is ``plain_walk`` with one more wrapper.
"""

from __future__ import annotations

import os
import random
from typing import Optional

import gymnasium as gym
import numpy as np
from gymnasium import spaces


class PlainWalkEnv(gym.Env):
    metadata = {"render_modes": []}

    def __init__(self, max_length: int = 12):
        self.observation_space = spaces.Box(-np.inf, np.inf, (2,), np.float32)
        self.action_space = spaces.Discrete(3)
        self.max_length = int(max_length)
        self.gusts = random.Random(0)
        self.position, self.t, self.length = 0.0, 0, 1

    def _obs(self) -> np.ndarray:
        return np.array([self.position, self.t / self.length], np.float32)

    def reset(self, *, seed: Optional[int] = None, options: Optional[dict] = None):
        super().reset(seed=seed)
        if seed is not None:
            self.gusts.seed(seed)
        self.position = float(self.np_random.normal())
        self.length = int(self.np_random.integers(2, self.max_length + 1))
        self.t = 0
        return self._obs(), {"length": self.length}

    def step(self, action):
        self.position += float(action) - 1.0 + 0.1 * float(self.np_random.normal()) + self.gusts.uniform(-0.2, 0.2)
        self.t += 1
        terminated = abs(self.position) > 4.0
        return self._obs(), -abs(self.position), terminated, self.t >= self.length, {"t": self.t}


class NoisyObservation(gym.Wrapper):
    """Observation noise from a generator of its own (reseeded by a seeded reset) and from the
    env's ``np_random``; now and then a reward bonus drawn from a ``random.Random``."""

    def __init__(self, env: gym.Env, scale: float = 0.01):
        super().__init__(env)
        self.scale = float(scale)
        self.noise = np.random.default_rng(0)
        self.bonus = random.Random(0)

    def _noisy(self, obs: np.ndarray) -> np.ndarray:
        own = self.noise.standard_normal(obs.shape)
        shared = self.np_random.uniform(-1.0, 1.0, obs.shape)
        return (obs + self.scale * (own + shared)).astype(np.float32)

    def reset(self, *, seed: Optional[int] = None, options: Optional[dict] = None):
        if seed is not None:
            self.noise = np.random.default_rng(seed + 1)
            self.bonus.seed(seed + 2)
        obs, info = self.env.reset(seed=seed, options=options)
        return self._noisy(obs), info

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        bonus = 1.0 if self.bonus.random() < 0.1 else 0.0
        return self._noisy(obs), float(reward) + bonus, terminated, truncated, info


class Tally(gym.Wrapper):
    """Counts steps in an iterator: state that no portal-shm env state can carry."""

    def __init__(self, env: gym.Env):
        super().__init__(env)
        self.counter = iter(range(10**9))

    def step(self, action):
        next(self.counter)
        return self.env.step(action)


class CrashOnToken(gym.Wrapper):
    """Exits the process (as a segfault would end it) in ``phase`` (``"reset"``, or ``"first_step"``
    of an episode) when it can claim ``token_path``: the file holds how many crashes are left, and
    one process claims it at a time (a rename), so each crash happens once, in one env."""

    def __init__(self, env: gym.Env, token_path: str = "", phase: str = "reset"):
        super().__init__(env)
        self.token_path, self.phase = str(token_path), str(phase)
        self.first = False

    def _maybe_exit(self, phase: str) -> None:
        if phase != self.phase or not self.token_path:
            return
        claimed = f"{self.token_path}.{os.getpid()}"
        try:
            os.rename(self.token_path, claimed)
        except FileNotFoundError:
            return
        with open(claimed) as handle:
            left = int(handle.read() or 1) - 1
        if left > 0:
            with open(claimed, "w") as handle:
                handle.write(str(left))
            os.rename(claimed, self.token_path)
        else:
            os.unlink(claimed)
        os._exit(3)

    def reset(self, *, seed: Optional[int] = None, options: Optional[dict] = None):
        self._maybe_exit("reset")
        self.first = True
        return self.env.reset(seed=seed, options=options)

    def step(self, action):
        if self.first:
            self._maybe_exit("first_step")
        self.first = False
        return self.env.step(action)


def plain_walk(max_length: int = 12, max_episode_steps: int = 10) -> gym.Env:
    env = gym.wrappers.TimeLimit(gym.wrappers.OrderEnforcing(PlainWalkEnv(max_length)), max_episode_steps)
    return NoisyObservation(env)


def opaque_walk(max_length: int = 12, max_episode_steps: int = 10) -> gym.Env:
    return Tally(plain_walk(max_length, max_episode_steps))


def crashing_walk(
    token_path: str = "", phase: str = "reset", max_length: int = 12, max_episode_steps: int = 10
) -> gym.Env:
    return CrashOnToken(plain_walk(max_length, max_episode_steps), token_path, phase)
