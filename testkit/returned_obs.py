"""Envs that return a chosen observation for their space, right or wrong, for the tests that compare
how a portal and gymnasium's ``SyncVectorEnv`` take it (tests/unit/server/test_observation_check.py).

``CASES`` names each case: the observation space, the value returned, and whether ``SyncVectorEnv``
accepts it (the tests check that claim against SyncVectorEnv itself). ``ReturnsObs(case, phase)``
returns the case's value from ``reset`` or ``step`` (``phase``) where its reset seed is odd, and a
valid observation otherwise, so that the env at fault is one of several. ``returns_obs_batch`` is
the same as a native batch (``server/native.py``): one array for all its envs.
"""

from __future__ import annotations

import copy
from typing import Any, Callable, Optional

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from portal_shm.server.native import NativeBatch, batched

BOX4 = spaces.Box(-10.0, 10.0, (4,), np.float32)
PIXELS = spaces.Box(0, 255, (2,), np.uint8)
SMALL = spaces.Box(-100, 100, (2,), np.int8)
COUNT = spaces.Discrete(5)
NESTED = spaces.Dict({"pos": BOX4, "count": COUNT})

# name -> (space, a function making the value returned, whether SyncVectorEnv accepts it)
CASES: dict[str, tuple[gym.Space, Callable[[], Any], bool]] = {
    "scalar for Box(4,)": (BOX4, lambda: 3.0, False),
    "shape (3,) for Box(4,)": (BOX4, lambda: np.zeros(3, np.float32), False),
    "shape (1, 4) for Box(4,)": (BOX4, lambda: np.zeros((1, 4), np.float32), False),
    "300.7 for a uint8 Box": (PIXELS, lambda: np.array([300.7, 1.0]), False),
    "float 3.0 for a uint8 Box": (PIXELS, lambda: np.array([3.0, 1.0]), False),
    "-1 for a uint8 Box": (PIXELS, lambda: np.array([-1, 1]), False),
    "a list of floats for Box(4,)": (BOX4, lambda: [1.5, 2.0, 3.0, 4.0], True),
    "float64 for a float32 Box": (BOX4, lambda: np.array([0.1, 0.2, 0.3, 1e300]), True),
    "int64 300 for an int8 Box": (SMALL, lambda: np.array([300, 1], np.int64), True),
    "int for Discrete": (COUNT, lambda: 3, True),
    "bool for Discrete": (COUNT, lambda: True, True),
    "float for Discrete": (COUNT, lambda: 3.0, False),
    "shape (1,) for Discrete": (COUNT, lambda: np.array([3]), False),
    "a scalar inside a Dict": (NESTED, lambda: {"pos": 3.0, "count": 1}, False),
    "a float Discrete inside a Dict": (NESTED, lambda: {"pos": np.zeros(4, np.float32), "count": 2.0}, False),
    "int and float64 inside a Dict": (NESTED, lambda: {"pos": np.ones(4), "count": 4}, True),
}


class ReturnsObs(gym.Env):
    """Returns ``CASES[case]``'s value from ``phase`` ("reset" or "step") where its last reset seed
    was odd, a valid observation of the space otherwise."""

    metadata = {"render_modes": []}

    def __init__(self, case: str, phase: str = "step"):
        space, self.value, _ = CASES[case]
        self.observation_space = copy.deepcopy(space)  # its own generator (``sample``), as in a server
        self.action_space = spaces.Discrete(2)
        self.phase = phase
        self.wrong = False

    def _obs(self, phase: str) -> Any:
        if self.wrong and phase == self.phase:
            return self.value()
        return self.observation_space.sample()

    def reset(self, *, seed: Optional[int] = None, options: Optional[dict] = None):
        super().reset(seed=seed)
        self.observation_space.seed(seed)
        self.wrong = seed is not None and seed % 2 == 1
        return self._obs("reset"), {}

    def step(self, action):
        return self._obs("step"), 1.0, False, False, {}


class ReturnsObsBatch(NativeBatch):
    """``num_envs`` ``ReturnsObs`` envs as a native batch: their observations in one array, made as
    a batched implementation would make it without looking (``np.stack``, or an object array where
    their shapes differ)."""

    name = "testkit.returned_obs"

    def __init__(self, num_envs: int, case: str, phase: str = "step"):
        self.envs = [ReturnsObs(case, phase) for _ in range(num_envs)]
        self.num_envs = num_envs
        self.single_observation_space = self.envs[0].observation_space
        self.single_action_space = self.envs[0].action_space
        self.last: list = [None] * num_envs

    def _batch(self) -> np.ndarray:
        try:
            return np.stack([np.asanyarray(obs) for obs in self.last])
        except ValueError:
            out = np.empty(self.num_envs, object)
            for j, obs in enumerate(self.last):
                out[j] = obs
            return out

    def reset(self, indices: np.ndarray, seeds: Any) -> Any:
        for j, seed in zip(indices, seeds):
            self.last[j] = self.envs[j].reset(seed=seed)[0]
        return self._batch(), [{} for _ in indices]

    def step(self, actions: np.ndarray) -> Any:
        self.last = [env.step(action)[0] for env, action in zip(self.envs, actions)]
        self.stepped()
        count = self.num_envs
        return self._batch(), np.ones(count), np.zeros(count, bool), np.zeros(count, bool), [[{}]] * count


@batched
def returns_obs_batch(num_envs: int, case: str, phase: str = "step") -> ReturnsObsBatch:
    return ReturnsObsBatch(num_envs, case, phase)
