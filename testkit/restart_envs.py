"""Envs that fail at an exact moment, for the restart-counting tests (tests/integration/test_restart_counts.py).

A ``TokenFaultEnv`` is a ``LeakyEnv`` (a seeded walk with its own states, so it recycles) whose
process exits in ``phase`` once: when the file ``token_path`` exists there (it is removed first),
so a test picks the moment by writing the file. ``restore_s`` makes every ``set_state`` sleep, so
that a recycled server's fresh one is still restoring when the test kills it between two steps.
"""

from __future__ import annotations

import os
import time
from typing import Optional

from portal_shm.server.example_envs import LeakyEnv


class TokenFaultEnv(LeakyEnv):
    def __init__(self, token_path: str = "", phase: str = "step", restore_s: float = 0.0, episode_length: int = 4):
        super().__init__(0.0, episode_length)
        self.token_path, self.phase, self.restore_s = token_path, phase, float(restore_s)
        self._maybe_exit("init")

    def _maybe_exit(self, phase: str) -> None:
        if phase == self.phase and self.token_path and os.path.exists(self.token_path):
            os.unlink(self.token_path)
            os._exit(3)

    def reset(self, *, seed: Optional[int] = None, options: Optional[dict] = None):
        self._maybe_exit("reset")
        return super().reset(seed=seed, options=options)

    def step(self, action):
        self._maybe_exit("step")
        return super().step(action)

    def render(self):
        self._maybe_exit("render")
        return None

    def set_state(self, state: dict) -> None:
        self._maybe_exit("set_state")
        if self.restore_s:
            time.sleep(self.restore_s)
        super().set_state(state)
