"""Small envs shipped with portal-shm for benchmarks, smoke tests and the test suite.

Use them by entry point, e.g. ``make_vec("portal_shm.server.example_envs:NullEnv", 8, shape=(84, 84, 4))``.
They run inside env runtimes, so they need gymnasium there (not in the env server itself).
"""

from __future__ import annotations

import collections
import dataclasses
import enum
import fractions
import os
import signal
import threading
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
    the state of the env, its generator and its wrappers travel in ``portal_shm`` env states."""

    def __init__(self, episode_length: int = 50):
        self.observation_space = spaces.Box(-np.inf, np.inf, (1,), np.float32)
        self.action_space = spaces.Discrete(2)
        self.episode_length, self.position, self.t = int(episode_length), 0.0, 0

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
    render or physics thread do: unsafe to fork, so recycling starts its spares fresh."""

    def __init__(self, leak_mb: float = 0.0, episode_length: int = 4, step_ms: float = 0.0):
        super().__init__(leak_mb, episode_length, step_ms)
        self.ticks = 0
        self.stopping = threading.Event()
        threading.Thread(target=self._tick, name="threading-env-worker", daemon=True).start()

    def _tick(self) -> None:
        while not self.stopping.wait(0.05):
            self.ticks += 1

    def close(self) -> None:
        self.stopping.set()


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


class LeavingAgentsEnv:
    """A PettingZoo ParallelEnv by duck typing (no PettingZoo needed), of ``num_agents`` agents ``a_0, a_1, ...``: ``leaver`` terminates on step
    ``leave_at`` and is back in ``agents`` from step ``return_at``; every agent is truncated at
    ``episode_length``.

    Observations are ``[t, agent index, noise]`` (noise from the reset seed), rewards the action
    plus the agent's index. ``seen`` records the actions of every step; a step with an action for
    an agent not in ``agents`` raises, so an env that runs through proves it never got one. With
    ``info_masks`` each agent's info holds an ``action_mask`` that forbids action ``t % 3``.
    """

    metadata = {"render_modes": []}

    def __init__(
        self,
        num_agents: int = 3,
        leaver: int = 1,
        leave_at: int = 10,
        return_at: int = 20,
        episode_length: int = 30,
        info_masks: bool = False,
    ) -> None:
        self.info_masks = info_masks
        self.possible_agents = [f"a_{i}" for i in range(num_agents)]
        self.leaver = self.possible_agents[leaver]
        self.leave_at, self.return_at, self.episode_length = leave_at, return_at, episode_length
        self.agents: list = []
        self.seen: list = []
        self.t = 0
        self.rng = np.random.default_rng()

    def observation_space(self, agent: str) -> spaces.Box:
        return spaces.Box(-np.inf, np.inf, (3,), np.float32)

    def action_space(self, agent: str) -> spaces.Discrete:
        return spaces.Discrete(3)

    def _obs(self, agent: str) -> np.ndarray:
        index = self.possible_agents.index(agent)
        return np.array([self.t, index, self.rng.normal()], np.float32)

    def reset(self, seed: Optional[int] = None, options: Optional[dict] = None) -> tuple:
        if seed is not None:
            self.rng = np.random.default_rng(seed)
        self.t = 0
        self.agents = list(self.possible_agents)
        return {a: self._obs(a) for a in self.agents}, {a: self._info() for a in self.agents}

    def _info(self) -> dict:
        if not self.info_masks:
            return {}
        mask = np.ones(3, np.int8)
        mask[self.t % 3] = 0
        return {"action_mask": mask, "t": self.t}

    def step(self, actions: dict) -> tuple:
        if set(actions) != set(self.agents):
            raise ValueError(f"step {self.t + 1}: actions for {sorted(actions)}, agents are {self.agents}")
        self.seen.append({agent: int(action) for agent, action in actions.items()})
        self.t += 1
        rewards = {a: float(actions[a]) + self.possible_agents.index(a) for a in self.agents}
        terminated = {a: self.t == self.leave_at and a == self.leaver for a in self.agents}
        truncated = {a: self.t >= self.episode_length for a in self.agents}
        obs = {a: self._obs(a) for a in self.agents}
        infos: dict = {a: self._info() for a in self.agents}
        self.agents = [a for a in self.agents if not (terminated[a] or truncated[a])]
        if self.t == self.return_at and self.t < self.episode_length:
            self.agents = [a for a in self.possible_agents if a in self.agents or a == self.leaver]
            obs[self.leaver] = self._obs(self.leaver)
            infos[self.leaver] = {"back": True, **self._info()}
        return obs, rewards, terminated, truncated, infos

    def close(self) -> None:
        pass


def named_agents_env(env_id: str = "", num_envs: int = 1, groups: Any = None, num_agents: int = 3) -> LeavingAgentsEnv:
    """A ``LeavingAgentsEnv`` made by a function whose arguments are named like ``make_vec_ma``'s and
    its adapters' own (``env_id``, ``num_envs``, ``groups``); ``made_with`` holds what it got."""
    env = LeavingAgentsEnv(num_agents=num_agents)
    env.made_with = {"env_id": env_id, "num_envs": num_envs, "groups": groups, "num_agents": num_agents}
    return env


class MatchingPenniesEnv(gym.Env):
    """Both players' actions in one Dict, one reward (the first player's, zero-sum): the DIAMBRA 2P
    shape, for ``portal_shm.server.multi_agent:two_player``.

    Each round the first player wins 1 when the coins match (plus a seeded bonus, so rewards carry
    the seed), else loses it; the episode is ``rounds`` rounds."""

    def __init__(self, rounds: int = 5) -> None:
        self.observation_space = spaces.Box(-np.inf, np.inf, (2,), np.float32)
        self.action_space = spaces.Dict({"agent_0": spaces.Discrete(2), "agent_1": spaces.Discrete(2)})
        self.rounds, self.t = int(rounds), 0

    def _obs(self) -> np.ndarray:
        return np.array([self.t, self.np_random.normal()], np.float32)

    def reset(self, *, seed: Optional[int] = None, options: Optional[dict] = None) -> tuple:
        super().reset(seed=seed)
        self.t = 0
        return self._obs(), {"round": 0}

    def step(self, action: Any) -> tuple:
        self.t += 1
        same = int(action["agent_0"]) == int(action["agent_1"])
        reward = (1.0 if same else -1.0) + float(self.np_random.uniform(0, 0.5))
        return self._obs(), reward, self.t >= self.rounds, False, {"round": self.t}


class ClashingInfosEnv(gym.Env):
    """Infos that clash in a batch: an env reset with an even seed says ``{"d": {"_x": {"y": 1}}}``,
    one with an odd seed ``{"d": {"x": 1}}`` (``flip`` swaps them), at every step from step
    ``after`` on. Batched in env order, ``_x`` is then both a sub-dict and the mask of ``x``: what a
    hostile or careless env sends a host, whose sessions must contain it. ``step_ms`` makes a step
    slow (a host then finishes it on the session's thread instead of its router's)."""

    def __init__(self, flip: bool = False, after: int = 0, step_ms: float = 0.0):
        self.observation_space = spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.action_space = spaces.Discrete(2)
        self.flip, self.after, self.step_ms = bool(flip), int(after), float(step_ms)
        self.variant, self.t = 0, 0

    def reset(self, *, seed: Optional[int] = None, options: Optional[dict] = None):
        super().reset(seed=seed)
        if seed is not None:
            self.variant = (int(seed) + self.flip) % 2
        self.t = 0
        return np.zeros(2, np.float32), {}

    def step(self, action):
        if self.step_ms:
            time.sleep(self.step_ms / 1000)
        self.t += 1
        info: dict = {}
        if self.t > self.after:
            info = {"d": {"_x": {"y": 1}}} if self.variant == 0 else {"d": {"x": 1}}
        return np.full(2, self.t % 2, np.float32), float(action), False, self.t >= 100, info


class DoorbellStormEnv(gym.Env):
    """A hostile env that rings every pipe its server process can write to, ``rings`` times per
    step (its server's doorbells to the agent among them): an env runs inside its server, so it
    can. The agent must take the rings for what they are, spurious wake-ups, and a host must not
    let them cost its other tenants."""

    def __init__(self, rings: int = 1000):
        self.observation_space = spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.action_space = spaces.Discrete(2)
        self.rings, self.t = int(rings), 0

    def _ring(self) -> None:
        import os
        import stat

        for name in os.listdir("/proc/self/fd"):
            try:
                fd = int(name)
                if not stat.S_ISFIFO(os.fstat(fd).st_mode):
                    continue
                for _ in range(self.rings):
                    os.write(fd, b"\1")
            except (OSError, ValueError):
                continue

    def reset(self, *, seed: Optional[int] = None, options: Optional[dict] = None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(2, np.float32), {}

    def step(self, action):
        self._ring()
        self.t += 1
        return np.full(2, self.t % 2, np.float32), 1.0, False, self.t >= 50, {}


class _DeclaredBox:
    """A look-alike of ``Box`` (matched by class name, as every runtime's spaces are) whose bounds
    are broadcast views: the env pays for its shape only when they are sent."""

    def __init__(self, shape: tuple) -> None:
        self.shape, self.dtype = shape, np.dtype(np.uint8)
        self.low = np.broadcast_to(np.uint8(0), shape)
        self.high = np.broadcast_to(np.uint8(255), shape)


_DeclaredBox.__name__ = "Box"


class HugeSpaceEnv(gym.Env):
    """Declares an observation space of ``side`` x ``side`` bytes and never makes anything that
    large: what a hostile env declares to make the agent (or an env host) size a ring of gigabytes."""

    def __init__(self, side: int = 8192):
        self.observation_space = _DeclaredBox((int(side), int(side)))
        self.action_space = spaces.Discrete(2)

    def reset(self, *, seed: Optional[int] = None, options: Optional[dict] = None):
        super().reset(seed=seed)
        return np.broadcast_to(np.zeros(1, np.uint8), self.observation_space.shape), {}

    def step(self, action):
        return np.broadcast_to(np.zeros(1, np.uint8), self.observation_space.shape), 0.0, False, False, {}


def _own_server() -> Any:
    """The ``EnvServer`` stepping the calling env, found on the stack: an env runs inside its
    server's process, so a hostile one can reach everything the server holds."""
    import inspect

    frame = inspect.currentframe()
    while frame is not None:
        candidate = frame.f_locals.get("self")
        if hasattr(candidate, "mailbox") and hasattr(candidate, "done"):
            return candidate
        frame = frame.f_back
    raise RuntimeError("no env server on the stack")


class WedgingEnv(gym.Env):
    """A hostile env that wedges its server where the agent's side can see it, from its ``after``-th
    step on, then sleeps for ``sleep`` seconds inside ``step``:

    - ``how="writing"``: sets its server's status word to WRITING (the early ring's "results
      follow at once") and rings the agent;
    - ``how="promise"``: says its results are done and a message follows (status OK, extra flag set),
      rings the agent, and never sends the message.

    An agent (or an env host's router) that waits for either without a deadline waits forever."""

    def __init__(self, how: str = "writing", after: int = 3, sleep: float = 3600.0):
        if how not in ("writing", "promise"):
            raise ValueError(f"how={how!r}: give 'writing' or 'promise'")
        self.observation_space = spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.action_space = spaces.Discrete(2)
        self.how, self.after, self.sleep, self.t = how, int(after), float(sleep), 0

    def reset(self, *, seed: Optional[int] = None, options: Optional[dict] = None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(2, np.float32), {}

    def step(self, action):
        from portal_shm.wire.layout import EXTRA, STATUS, STATUS_OK, STATUS_WRITING

        self.t += 1
        if self.t >= self.after:
            server = _own_server()
            words = server.mailbox
            if self.how == "writing":
                words[STATUS] = STATUS_WRITING
            else:
                words[EXTRA] = 1
                words[STATUS] = STATUS_OK
            server.done.ring()
            time.sleep(self.sleep)
        return np.full(2, self.t % 2, np.float32), 1.0, False, False, {}


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


class BigInfoEnv(gym.Env):
    """From step ``after`` on, returns ``info["frame"]``, an array of ``info_bytes`` bytes: what
    ``info["frame"] = env.render()`` gives at 1080p (6 MB per env; 48 such envs on one server make
    one message past the cap on control messages). ``blob(n)`` returns ``n`` bytes, for ``call``.

    ``unchecked``: its server sends messages without measuring them first, as a server older than
    that check did (an env can reach its server: it runs in that process), so that the agent's
    socket drops the message and the connection."""

    def __init__(self, info_bytes: int = 1920 * 1080 * 3, after: int = 1, unchecked: bool = False):
        self.observation_space = spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.action_space = spaces.Discrete(2)
        self.info_bytes, self.after, self.unchecked, self.t = int(info_bytes), int(after), bool(unchecked), 0

    def reset(self, *, seed: Optional[int] = None, options: Optional[dict] = None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(2, np.float32), {}

    def step(self, action):
        self.t += 1
        info = {}
        if self.t >= self.after:
            if self.unchecked:
                _own_server().max_message = 2**62
            info["frame"] = np.zeros(self.info_bytes, np.uint8)
        return np.full(2, self.t % 2, np.float32), 1.0, False, False, info

    def blob(self, size: int) -> np.ndarray:
        return np.zeros(int(size), np.uint8)


class InfoStatus(enum.IntEnum):
    """An IntEnum as NetHack's ``end_status`` (``nle.StepStatus``) is one."""

    RUNNING = 0
    DONE = 1


InfoPoint = collections.namedtuple("InfoPoint", "x y")


@dataclasses.dataclass
class InfoStats:
    score: int
    name: str


def info_value(kind: str, t: int) -> Any:
    """A value of ``kind`` (one of ``INFO_KINDS``) that changes with ``t``: each is a row of the
    infos table in docs/concepts/infos.md (what each runtime carries)."""
    if kind == "plain":
        return {"n": t, "f": t / 2, "b": t % 2 == 0, "s": f"t{t}", "by": bytes([t % 256]), "none": None,
                "list": [t, "x", [1.5]], "tuple": (t, ("a", b"b")), "dict": {"a": t, "b": [t]}}  # fmt: skip
    if kind == "numpy":
        return {"f32": np.float32(t), "i8": np.int8(-t), "c": np.complex64(t + 1j), "bool": np.bool_(t % 2),
                "arr": np.arange(t + 3, dtype=np.int16).reshape(1, -1), "str": np.array(["a", "bc"]),
                "in_list": [np.float64(t), np.zeros(2, np.uint8)]}  # fmt: skip
    if kind == "batched_subclass":  # subclasses that batching turns into their base anyway
        return collections.OrderedDict(n=t, m=np.ma.masked_array([t, 1], mask=[False, True]))
    values = {
        "intenum": lambda: InfoStatus(t % 2),
        "namedtuple": lambda: InfoPoint(t, -t),
        "set": lambda: {t, t + 1},
        "frozenset": lambda: frozenset([t, "x"]),
        "dataclass": lambda: InfoStats(t, "me"),
        "object_array": lambda: np.array([t, "x", None], dtype=object),
        "datetime64": lambda: np.datetime64(t, "s"),
        "datetime64_array": lambda: np.arange(t, t + 2).astype("datetime64[D]"),
        # (a timedelta64 scalar is an np.number: gymnasium's batching fails on it, not inside a list)
        "timedelta64": lambda: [np.timedelta64(t, "ms"), np.arange(2).astype("m8[ms]")],
        "subclass_in_list": lambda: [collections.OrderedDict(n=t)],
        "object": lambda: fractions.Fraction(t, 3),  # any other picklable object
        "unpicklable": lambda: threading.Lock(),
    }
    return values[kind]()


INFO_KINDS = (
    "plain", "numpy", "batched_subclass", "intenum", "namedtuple", "set", "frozenset", "dataclass", "object_array",
    "datetime64", "datetime64_array", "timedelta64", "subclass_in_list", "object", "unpicklable",
)  # fmt: skip


class InfoKindsEnv(gym.Env):
    """Returns in its infos a value of ``kind`` (``INFO_KINDS``), at every reset and step, under
    ``info["value"]`` and nested (``info["stats"]["when"]``); episodes of ``episode_length`` steps,
    so that autoresets carry it in ``final_info`` too.

    ``pickling``: a hostile env that makes its server pickle such values whatever the agent said (it
    runs in the server's process), as if its runtime were no trust boundary."""

    def __init__(self, kind: str = "plain", episode_length: int = 3, pickling: bool = False):
        self.observation_space = spaces.Box(-1.0, 1.0, (1,), np.float32)
        self.action_space = spaces.Discrete(2)
        self.kind, self.episode_length, self.pickling, self.t = kind, int(episode_length), bool(pickling), 0

    def _info(self) -> dict:
        if self.pickling:
            from portal_shm.wire.info_codec import PICKLE, InfoCodec

            _own_server().info_codec = InfoCodec(PICKLE)
        return {"value": info_value(self.kind, self.t), "stats": {"when": info_value(self.kind, self.t + 1)}}

    def reset(self, *, seed: Optional[int] = None, options: Optional[dict] = None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(1, np.float32), self._info()

    def step(self, action):
        self.t += 1
        return np.zeros(1, np.float32), float(self.t), False, self.t >= self.episode_length, self._info()
