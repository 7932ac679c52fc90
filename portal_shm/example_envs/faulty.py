"""Envs that fail or decay on purpose: crash, hang or stop (``FaultyEnv``), leak and slow down over
a long run, die in a restore or run threads (``LeakyEnv`` and its kin): what restarts and recycling are tested with."""

from __future__ import annotations

import os
import signal
import threading
import time
from typing import Optional

import gymnasium as gym
import numpy as np
from gymnasium import spaces


class FaultyEnv(gym.Env):
    """Fails on purpose in a chosen phase after ``after`` steps: ``raise``, ``segfault``, ``exit``
    (``os._exit(7)``), ``hang`` (sleeps), ``slow`` (sleeps two seconds, then goes on), ``spin`` (an endless Python loop), ``stop`` (SIGSTOPs
    its own process), ``oom`` (allocates memory until the runtime's limit kills it) or, in
    ``step``, ``bad_reward`` (returns a reward that is not a number)."""

    def __init__(self, fault: str = "raise", phase: str = "step", after: int = 0, only_env: Optional[int] = None):
        self.observation_space = spaces.Box(-1.0, 1.0, (3,), np.float32)
        self.action_space = spaces.Discrete(2)
        self.fault, self.phase, self.after = fault, phase, after
        self.steps = 0

    def _maybe_fail(self, phase: str) -> None:
        if phase != self.phase or self.steps < self.after:
            return
        if self.fault == "raise":
            raise ValueError(f"FaultyEnv failed in {phase} on purpose")
        if self.fault == "segfault":
            os.kill(os.getpid(), signal.SIGSEGV)
        if self.fault == "exit":
            os._exit(7)
        if self.fault == "hang":
            time.sleep(3600)
        if self.fault == "slow":
            time.sleep(2.0)
        if self.fault == "spin":
            while True:
                pass
        if self.fault == "stop":
            os.kill(os.getpid(), signal.SIGSTOP)
        if self.fault == "oom":
            hoard = []
            while True:
                hoard.append(np.ones(16 * 2**20, np.uint8))

    def reset(self, *, seed: Optional[int] = None, options: Optional[dict] = None):
        super().reset(seed=seed)
        self._maybe_fail("reset")
        return np.zeros(3, np.float32), {}

    def step(self, action):
        self.steps += 1
        if self.fault == "bad_reward" and self.steps > self.after:
            return np.full(3, 0.5, np.float32), "lots", False, False, {}
        self._maybe_fail("step")
        return np.full(3, 0.5, np.float32), 1.0, False, False, {}

    def render(self):
        self._maybe_fail("render")
        return None

    def close(self):
        self._maybe_fail("close")


class LeakyEnv(gym.Env):
    """A seeded walk that leaks ``leak_mb`` MiB at every reset (held until its process exits), as
    envs that rot over a long run do; episodes end at seeded, varying steps. Its own
    ``get_state``/``set_state`` carry it (not its leak) into a fresh server: what recycling needs to
    keep trajectories unchanged."""

    def __init__(self, leak_mb: float = 5.0, episode_length: int = 4, step_ms: float = 0.0):
        self.observation_space = spaces.Box(-np.inf, np.inf, (2,), np.float32)
        self.action_space = spaces.Discrete(3)
        self.leak_mb, self.episode_length, self.step_ms = float(leak_mb), int(episode_length), float(step_ms)
        self.leaked: list = []
        self.position, self.t, self.limit = 0.0, 0, self.episode_length

    def _obs(self) -> np.ndarray:
        return np.array([self.position, self.t], np.float32)

    def reset(self, *, seed: Optional[int] = None, options: Optional[dict] = None):
        super().reset(seed=seed)
        if self.leak_mb > 0:
            self.leaked.append(np.ones(int(self.leak_mb * 2**20), np.uint8))  # touched: resident
        self.position, self.t = float(self.np_random.normal()), 0
        self.limit = int(self.np_random.integers(1, 2 * self.episode_length))
        return self._obs(), {"limit": self.limit}

    def step(self, action):
        if self.step_ms:
            time.sleep(self.step_ms / 1000)
        self.t += 1
        self.position += 0.5 * (float(action) - 1.0) + float(self.np_random.normal())
        terminated = abs(self.position) > 3.0
        return self._obs(), self.position, terminated, self.t >= self.limit, {"t": self.t}

    def get_state(self) -> dict:
        return {"position": self.position, "t": self.t, "limit": self.limit}

    def set_state(self, state: dict) -> None:
        self.position, self.t, self.limit = float(state["position"]), int(state["t"]), int(state["limit"])


class DyingRestoreEnv(LeakyEnv):
    """A ``LeakyEnv`` whose process exits in ``set_state`` once, if ``token_path`` exists when it
    is called (the file is removed first): a recycled spare that dies after the old server closed."""

    def __init__(self, token_path: str = "", episode_length: int = 4):
        super().__init__(0.0, episode_length)
        self.token_path = token_path

    def set_state(self, state: dict) -> None:
        if self.token_path and os.path.exists(self.token_path):
            os.unlink(self.token_path)
            os._exit(3)
        super().set_state(state)


class ThreadingEnv(LeakyEnv):
    """A ``LeakyEnv`` that runs a worker thread from its construction on, as simulators with a
    render or physics thread do: a process holding one is unsafe to fork. Its thread ends when it
    closes (as ALE's vector env's pool does), unless ``stop_on_close=False`` (a thread that lives as
    long as the process: a zygote of these envs cannot fork at all)."""

    def __init__(self, leak_mb: float = 0.0, episode_length: int = 4, step_ms: float = 0.0, stop_on_close: bool = True):
        super().__init__(leak_mb, episode_length, step_ms)
        self.ticks = 0
        self.stop_on_close = bool(stop_on_close)
        self.stopping = threading.Event()
        self.worker = threading.Thread(target=self._tick, name="threading-env-worker", daemon=True)
        self.worker.start()

    def _tick(self) -> None:
        while not self.stopping.wait(0.05):
            self.ticks += 1

    def close(self) -> None:
        if self.stop_on_close:
            self.stopping.set()
            self.worker.join()


class SlowingEnv(LeakyEnv):
    """A ``LeakyEnv`` (no leak by default) whose step, ``step_ms`` at first, takes one ``step_ms``
    longer every ``ramp_steps`` steps of its process: an env that slows down as it runs."""

    def __init__(self, step_ms: float = 0.5, ramp_steps: int = 500, leak_mb: float = 0.0, episode_length: int = 20):
        super().__init__(leak_mb, episode_length, step_ms)
        self.base_ms, self.ramp_steps, self.steps_here = float(step_ms), int(ramp_steps), 0

    def step(self, action):
        self.steps_here += 1
        self.step_ms = self.base_ms * (1 + self.steps_here / self.ramp_steps)
        return super().step(action)
