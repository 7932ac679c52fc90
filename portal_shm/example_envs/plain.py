"""Well-behaved envs for benchmarks, smoke tests and the contract suite: a known cost per step
(``NullEnv``, ``SlowEnv``), every space kind and sparse infos (``NestedEnv``, ``TextObsEnv``), a state
of their own (``RandomWalkEnv``), the pre-0.26 gym API (``LegacyCounterEnv``), large kwargs (``PayloadEnv``)."""

from __future__ import annotations

import time
from typing import Any, Optional

import gymnasium as gym
import numpy as np
from gymnasium import spaces


class NullEnv(gym.Env):
    """Returns one preallocated frame every step: measures pure transport cost.

    ``renders`` counts its ``render()`` calls, so tests can tell which envs were rendered."""

    metadata = {"render_modes": ["rgb_array"]}

    def __init__(self, shape: Any = (210, 160, 3), episode_length: int = 1000, render_mode: Optional[str] = None):
        self.observation_space = spaces.Box(0, 255, tuple(shape), np.uint8)
        self.action_space = spaces.Discrete(6)
        self.frame = np.zeros(tuple(shape), np.uint8)
        self.episode_length = episode_length
        self.render_mode = render_mode
        self.renders = 0
        self.t = 0

    def reset(self, *, seed: Optional[int] = None, options: Optional[dict] = None):
        super().reset(seed=seed)
        self.t = 0
        return self.frame, {}

    def step(self, action):
        self.t += 1
        return self.frame, 0.0, False, self.t >= self.episode_length, {}

    def render(self):
        self.renders += 1
        return self.frame


class SlowEnv(gym.Env):
    """Takes ``step_ms`` per step (sleeping, as an env waiting on a simulator would): a known cost."""

    def __init__(self, step_ms: float = 1.0, episode_length: int = 200):
        self.observation_space = spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.action_space = spaces.Discrete(2)
        self.step_ms, self.episode_length, self.t = float(step_ms), int(episode_length), 0

    def reset(self, *, seed: Optional[int] = None, options: Optional[dict] = None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(2, np.float32), {}

    def step(self, action):
        time.sleep(self.step_ms / 1000)
        self.t += 1
        return np.zeros(2, np.float32), 1.0, False, self.t >= self.episode_length, {}


class RandomWalkEnv(gym.Env):
    """A noisy walk (the noise from ``np_random``) with ``get_state``/``set_state`` of its own:
    the state of the env, its generator and its wrappers travel in ``portal_shm`` env states.
    ``draw_at_make``: draw the generator as the env is made, as envs that lay out a level or seed
    an emulator there do (ALE): copies forked after that share it until seeded."""

    def __init__(self, episode_length: int = 50, draw_at_make: bool = False):
        self.observation_space = spaces.Box(-np.inf, np.inf, (1,), np.float32)
        self.action_space = spaces.Discrete(2)
        self.episode_length, self.position, self.t = int(episode_length), 0.0, 0
        if draw_at_make:
            self.np_random.random()

    def reset(self, *, seed: Optional[int] = None, options: Optional[dict] = None):
        super().reset(seed=seed)
        self.position, self.t = float(self.np_random.normal()), 0
        return np.array([self.position], np.float32), {}

    def step(self, action):
        self.position += float(action) - 0.5 + 0.1 * float(self.np_random.normal())
        self.t += 1
        obs = np.array([self.position], np.float32)
        return obs, self.position, False, self.t >= self.episode_length, {"t": self.t}

    def get_state(self) -> dict:
        return {"position": self.position, "t": self.t}

    def set_state(self, state: dict) -> None:
        self.position, self.t = float(state["position"]), int(state["t"])


class NestedEnv(gym.Env):
    """Nested Dict/Tuple observations of every fixed leaf kind, seeded dynamics and sparse infos.

    Infos appear only on some steps and with varying keys, types and nesting, which is what
    vector envs get wrong most easily.
    """

    metadata = {"render_modes": ["rgb_array"], "render_fps": 30}

    def __init__(self, episode_length: int = 7, render_mode: Optional[str] = None):
        self.observation_space = spaces.Dict(
            {
                "image": spaces.Box(0, 255, (4, 5, 3), np.uint8),
                "state": spaces.Tuple(
                    (
                        spaces.Box(-1.0, 1.0, (3,), np.float32),
                        spaces.Discrete(5, start=2),
                        spaces.Dict({"bits": spaces.MultiBinary(4), "keys": spaces.MultiDiscrete([3, 4])}),
                    )
                ),
                "position": spaces.Box(-10.0, 10.0, (2,), np.float64),
            }
        )
        self.action_space = spaces.Dict({"move": spaces.Discrete(3), "force": spaces.Box(-1.0, 1.0, (2,), np.float32)})
        self.episode_length = episode_length
        self.render_mode = render_mode
        self.t = 0

    def _obs(self) -> dict:
        rng = self.np_random
        return {
            "image": rng.integers(0, 256, (4, 5, 3), dtype=np.uint8),
            "state": (
                rng.uniform(-1, 1, 3).astype(np.float32),
                int(rng.integers(2, 7)),
                {"bits": rng.integers(0, 2, 4).astype(np.int8), "keys": rng.integers(0, [3, 4]).astype(np.int64)},
            ),
            "position": rng.uniform(-10, 10, 2),
        }

    def reset(self, *, seed: Optional[int] = None, options: Optional[dict] = None):
        super().reset(seed=seed)
        self.t = 0
        info: dict = {"start": int(self.np_random.integers(100))}
        if options and "note" in options:
            info["note"] = str(options["note"])
        return self._obs(), info

    def step(self, action):
        self.t += 1
        move = int(action["move"])
        force = np.asarray(action["force"], np.float32)
        reward = float(move) - float(np.abs(force).sum()) + float(self.np_random.normal())
        terminated = bool(self.np_random.random() < 0.1)
        truncated = self.t >= self.episode_length
        info: dict = {}
        if self.t % 2 == 0:
            info["even"] = self.t
        if move == 2:
            info["detail"] = {"force": force.copy(), "ratio": np.float32(reward / 3)}
        if self.t % 3 == 0:
            info["tag"] = f"t{self.t}"
            info["flag"] = np.bool_(terminated)
        return self._obs(), reward, terminated, truncated, info

    def render(self):
        return np.full((8, 8, 3), self.t, np.uint8)


class LegacyCounterEnv:
    """An env written against the pre-0.26 gym API: ``seed()``, ``reset() -> obs``, 4-tuple steps.

    Deliberately not a gymnasium.Env: this is how old code bases look, and the server must adapt it.
    """

    metadata = {"render.modes": ["rgb_array"]}

    def __init__(self, limit: int = 5):
        self.observation_space = spaces.Box(0, 100, (2,), np.int64)
        self.action_space = spaces.Discrete(3)
        self.limit = limit
        self.rng = np.random.RandomState(0)
        self.count = 0
        self.t = 0

    def seed(self, seed=None):
        self.rng = np.random.RandomState(seed)
        return [seed]

    def reset(self):
        self.count = int(self.rng.randint(0, 10))
        self.t = 0
        return np.array([self.count, self.t], np.int64)

    def step(self, action):
        self.t += 1
        self.count += int(action)
        done = self.count >= 12 or self.t >= self.limit
        info = {"TimeLimit.truncated": True} if self.t >= self.limit and self.count < 12 else {}
        return np.array([self.count, self.t], np.int64), float(action), done, info

    def render(self, mode="human"):
        return np.zeros((2, 2, 3), np.uint8)

    def close(self):
        pass


class TextObsEnv(gym.Env):
    """A Dict observation with a Text leaf: no fixed layout, so it travels beside the ring."""

    def __init__(self):
        self.observation_space = spaces.Dict(
            {"pos": spaces.Box(-5.0, 5.0, (2,), np.float32), "msg": spaces.Text(6, min_length=1)}
        )
        self.action_space = spaces.Discrete(3)
        self.t = 0

    def _obs(self) -> dict:
        return {
            "pos": self.np_random.uniform(-5, 5, 2).astype(np.float32),
            "msg": "".join(self.np_random.choice(list("abcxyz"), int(self.np_random.integers(1, 7)))),
        }

    def reset(self, *, seed: Optional[int] = None, options: Optional[dict] = None):
        super().reset(seed=seed)
        self.t = 0
        return self._obs(), {}

    def step(self, action):
        self.t += 1
        return self._obs(), float(action), False, self.t >= 4, {}


class PayloadEnv(gym.Env):
    """Keeps the ``payload`` it was made with (an env kwarg of any size: a lookup table, a level
    file's bytes) and reports its length: what large ``env_kwargs`` reaching a server exercise."""

    def __init__(self, payload: Any = "", episode_length: int = 5):
        self.payload = payload
        self.payload_length = len(payload)
        self.episode_length = int(episode_length)
        self.observation_space = spaces.Box(0.0, 1.0, (1,), np.float32)
        self.action_space = spaces.Discrete(2)
        self.t = 0

    def reset(self, *, seed: Optional[int] = None, options: Optional[dict] = None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(1, np.float32), {}

    def step(self, action):
        self.t += 1
        return np.full(1, self.t % 2, np.float32), 1.0, False, self.t >= self.episode_length, {}
