"""An env written against the pre-0.26 gym API, for the legacy image and the venv backend's tests.

``reset()`` takes no seed and returns only the observation, ``step`` returns ``(obs, reward, done,
info)`` with ``info["TimeLimit.truncated"]`` on time-outs, and seeding goes through ``seed()``.
It runs only inside a runtime with legacy ``gym`` and numpy 1.x (the legacy image, or the tests'
venv, which finds it by putting this directory on ``PYTHONPATH``); it reports that runtime's
versions as attributes.
"""

import os
import sys

import gym
import numpy as np
from gym import spaces


class LegacyRandomWalk(gym.Env):
    metadata = {"render.modes": []}

    def __init__(self, limit=20):
        self.observation_space = spaces.Box(-5.0, 5.0, (3,), np.float32)
        self.action_space = spaces.Discrete(3)
        self.limit = limit
        self.numpy_version = np.__version__
        self.gym_version = gym.__version__
        self.python_prefix = sys.prefix
        self.portal_shm_location = (
            os.path.dirname(sys.modules["portal_shm"].__file__) if "portal_shm" in sys.modules else ""
        )
        self.seed()

    def seed(self, seed=None):
        self.rng = np.random.RandomState(seed)
        return [seed]

    def reset(self):
        self.t = 0
        self.pos = self.rng.uniform(-1.0, 1.0, 3).astype(np.float32)
        return self.pos.copy()

    def step(self, action):
        self.t += 1
        drift = (int(action) - 1) * 0.5
        self.pos = np.clip(self.pos + drift + self.rng.normal(0.0, 0.7, 3), -5.0, 5.0).astype(np.float32)
        reward = float(-np.abs(self.pos).sum())
        done = bool(np.abs(self.pos).max() >= 3.0)
        info = {"t": self.t}
        if self.t >= self.limit and not done:
            done = True
            info["TimeLimit.truncated"] = True
        return self.pos.copy(), reward, done, info


def make(**kwargs):
    return LegacyRandomWalk(**kwargs)
