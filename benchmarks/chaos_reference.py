"""The reference a chaos soak checks each env against: the same env in this process, replayed with
the actions the agent sent.

A portal promises SyncVectorEnv's results, less one documented exception: when a server fails and
is restarted (docs/concepts/errors.md), its envs' episodes end in that step as truncated, reward 0,
with the last observation and ``info["env_restarted"]``; in NextStep mode the next step returns the
fresh env's reset observation, reset with ``restart_seed(seed, restarts)``. So each env gets a
one-env SyncVectorEnv stepped with that env's actions, and after a restart a fresh one reset with
that seed, as ``tests/integration/test_recovery.py`` does. A server that fails right after its
envs ended an episode is instead restored from their episode-end states and makes the step again:
that restart shows ``env_restarted`` on a step equal to the reference's, which counts as RESTARTED
too. A recycle is no exception at all: the recycled env's steps are checked like any other.
"""

from __future__ import annotations

from typing import Any, Callable

import gymnasium as gym
import numpy as np

from portal_shm import restart_seed

OK, RESTARTED, LOST = "ok", "restarted", "lost"


class EnvReplay:
    """One env's reference (NextStep autoreset): :meth:`check` judges each transition the agent got.

    A transition that does not match is lost; the replay then has diverged and keeps counting
    that env's steps as lost until a restart gives it a fresh reference (a lost step is lost for
    good: the envs cannot be told apart again before then).
    """

    def __init__(self, make: Callable[[], gym.Env], seed: int) -> None:
        self.make, self.seed = make, seed
        self.restarts = 0
        self.pending_reset = False  # restarted: the next step is the fresh env's reset
        self.diverged = False
        self.first_mismatch: dict = {}
        self.env, self.last = self._fresh(seed)

    def _fresh(self, seed: int) -> tuple:
        env = gym.vector.SyncVectorEnv([self.make], autoreset_mode="NextStep")
        obs, _ = env.reset(seed=seed)
        return env, obs[0].copy()

    def check_reset(self, obs: Any, restarted: bool = False) -> str:
        """The portal's first reset observation of this env (``restarted``: its server failed in the
        reset, which was repeated on a fresh one with the same seed; it counts for later restart seeds)."""
        self.restarts += restarted
        return self._verdict(np.array_equal(obs, self.last), "reset", obs)

    def check(self, action: Any, obs: Any, reward: float, terminated: bool, truncated: bool, restarted: bool) -> str:
        """One step's transition of this env: OK, RESTARTED (a documented truncation) or LOST."""
        if restarted:
            self.restarts += 1
            if not self.diverged and self._same_step(action, obs, reward, terminated, truncated):
                return RESTARTED  # restored at an episode's end: the step made again, exactly
            self.pending_reset = True
            same = truncated and not terminated and reward == 0.0 and np.array_equal(obs, self.last)
            return RESTARTED if same and not self.diverged else self._verdict(False, "restart", obs)
        if self.pending_reset:
            self.pending_reset = False
            self.env.close()
            self.env, self.last = self._fresh(restart_seed(self.seed, self.restarts))
            self.diverged = False
            same = np.array_equal(obs, self.last) and reward == 0.0 and not terminated and not truncated
            return self._verdict(same, "reset after restart", obs)
        same = self._same_step(action, obs, reward, terminated, truncated)
        return self._verdict(same, "step", obs)

    def _same_step(self, action: Any, obs: Any, reward: float, terminated: bool, truncated: bool) -> bool:
        """Step the reference with ``action``: whether the portal's transition is its transition.
        The reference moves on either way (a restart that cut the episode replaces it)."""
        r_obs, r_reward, r_terminated, r_truncated, _ = self.env.step(np.asarray([action]))
        same = (
            np.array_equal(obs, r_obs[0])
            and reward == r_reward[0]
            and terminated == r_terminated[0]
            and truncated == r_truncated[0]
        )
        if same:
            self.last = r_obs[0].copy()
        return bool(same)

    def _verdict(self, same: bool, what: str, obs: Any) -> str:
        if same and not self.diverged:
            self.last = np.array(obs, copy=True)
            return OK
        if not self.diverged:
            self.first_mismatch = {"what": what, "restarts": self.restarts}
        self.diverged = True
        return LOST

    def close(self) -> None:
        self.env.close()
