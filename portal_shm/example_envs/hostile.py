"""Hostile envs: an env runs inside its server's process, so it can ring its doorbells, wedge its
status word, declare huge spaces, send clashing or oversized infos, or reach the server itself
(``own_server``). The agent and an env host must contain each of them."""

from __future__ import annotations

import time
from typing import Any, Optional

import gymnasium as gym
import numpy as np
from gymnasium import spaces


class _BlinkingEnv(gym.Env):
    """What the hostile envs that attack from their steps share: two actions, observations of two
    floats (zeros at a reset, then the parity of the step count ``t``), episodes truncated after
    ``episode_length`` steps (0: never). Each says in ``attack`` what it does in a step."""

    episode_length = 0

    def __init__(self) -> None:
        self.observation_space = spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.action_space = spaces.Discrete(2)
        self.t = 0

    def reset(self, *, seed: Optional[int] = None, options: Optional[dict] = None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(2, np.float32), {}

    def step(self, action):
        self.t += 1
        reward, info = self.attack(action)
        return np.full(2, self.t % 2, np.float32), reward, False, 0 < self.episode_length <= self.t, info

    def attack(self, action: Any) -> tuple[float, dict]:
        """What the env does in step ``t`` (counted already); its reward and infos."""
        raise NotImplementedError


class ClashingInfosEnv(_BlinkingEnv):
    """Infos that clash in a batch: an env reset with an even seed says ``{"d": {"_x": {"y": 1}}}``,
    one with an odd seed ``{"d": {"x": 1}}`` (``flip`` swaps them), at every step from step
    ``after`` on. Batched in env order, ``_x`` is then both a sub-dict and the mask of ``x``: what a
    hostile or careless env sends a host, whose sessions must contain it. ``step_ms`` makes a step
    slow (a host then finishes it on the session's thread instead of its router's)."""

    episode_length = 100

    def __init__(self, flip: bool = False, after: int = 0, step_ms: float = 0.0):
        super().__init__()
        self.flip, self.after, self.step_ms = bool(flip), int(after), float(step_ms)
        self.variant = 0

    def reset(self, *, seed: Optional[int] = None, options: Optional[dict] = None):
        if seed is not None:
            self.variant = (int(seed) + self.flip) % 2
        return super().reset(seed=seed, options=options)

    def attack(self, action: Any) -> tuple[float, dict]:
        if self.step_ms:
            time.sleep(self.step_ms / 1000)
        info: dict = {}
        if self.t > self.after:
            info = {"d": {"_x": {"y": 1}}} if self.variant == 0 else {"d": {"x": 1}}
        return float(action), info


class DoorbellStormEnv(_BlinkingEnv):
    """A hostile env that rings every pipe its server process can write to, ``rings`` times per
    step (its server's doorbells to the agent among them): an env runs inside its server, so it
    can. The agent must take the rings for what they are, spurious wake-ups, and a host must not
    let them cost its other tenants."""

    episode_length = 50

    def __init__(self, rings: int = 1000):
        super().__init__()
        self.rings = int(rings)

    def attack(self, action: Any) -> tuple[float, dict]:
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
        return 1.0, {}


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

    def _obs(self) -> np.ndarray:
        return np.broadcast_to(np.zeros(1, np.uint8), self.observation_space.shape)

    def reset(self, *, seed: Optional[int] = None, options: Optional[dict] = None):
        super().reset(seed=seed)
        return self._obs(), {}

    def step(self, action):
        return self._obs(), 0.0, False, False, {}


def own_server() -> Any:
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


class WedgingEnv(_BlinkingEnv):
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
        super().__init__()
        self.how, self.after, self.sleep = how, int(after), float(sleep)

    def attack(self, action: Any) -> tuple[float, dict]:
        from portal_shm.wire.layout import EXTRA, STATUS, STATUS_OK, STATUS_WRITING

        if self.t >= self.after:
            server = own_server()
            words = server.mailbox
            if self.how == "writing":
                words[STATUS] = STATUS_WRITING
            else:
                words[EXTRA] = 1
                words[STATUS] = STATUS_OK
            server.done.ring()
            time.sleep(self.sleep)
        return 1.0, {}


class BigInfoEnv(_BlinkingEnv):
    """From step ``after`` on, returns ``info["frame"]``, an array of ``info_bytes`` bytes: what
    ``info["frame"] = env.render()`` gives at 1080p (6 MB per env; 48 such envs on one server make
    one message past the cap on control messages). ``blob(n)`` returns ``n`` bytes, for ``call``.

    ``unchecked``: its server sends messages without measuring them first, as a server older than
    that check did (an env can reach its server: it runs in that process), so that the agent's
    socket drops the message and the connection."""

    def __init__(self, info_bytes: int = 1920 * 1080 * 3, after: int = 1, unchecked: bool = False):
        super().__init__()
        self.info_bytes, self.after, self.unchecked = int(info_bytes), int(after), bool(unchecked)

    def attack(self, action: Any) -> tuple[float, dict]:
        info = {}
        if self.t >= self.after:
            if self.unchecked:
                own_server().link.max_message = 2**62
            info["frame"] = np.zeros(self.info_bytes, np.uint8)
        return 1.0, info

    def blob(self, size: int) -> np.ndarray:
        return np.zeros(int(size), np.uint8)
