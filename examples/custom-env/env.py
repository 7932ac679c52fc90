"""A custom env served from its own image: the image's entry calls portal_shm.serve(factory)."""

import gymnasium as gym
import numpy as np

import portal_shm


class GridWalk(gym.Env):
    """Walk on a line of ``size`` cells towards the goal at the right end."""

    def __init__(self, size: int = 8):
        self.size = size
        self.observation_space = gym.spaces.Box(0, 1, (size,), np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self.position = 0

    def _obs(self):
        obs = np.zeros(self.size, np.float32)
        obs[self.position] = 1.0
        return obs

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.position = int(self.np_random.integers(0, self.size // 2))
        return self._obs(), {}

    def step(self, action):
        self.position = int(np.clip(self.position + (1 if action == 1 else -1), 0, self.size - 1))
        at_goal = self.position == self.size - 1
        return self._obs(), 1.0 if at_goal else -0.01, at_goal, False, {"position": self.position}


if __name__ == "__main__":
    portal_shm.serve(GridWalk)  # kwargs from make_vec(..., size=12) reach GridWalk(size=12)
