"""The agent's own clock: its share of time inside portal calls and away from them (every kind)."""

from __future__ import annotations

import time
from collections import deque
from typing import Callable, Optional

WINDOW_S = 10.0


AGENT_SAMPLE_EVERY = 8  # a power of two; a sampled call costs two clock readings


SNAPSHOT_EVERY_S = 1.0


def check_window(window: float) -> float:
    """A stats window as every portal kind takes it: seconds in [0.1, 3600]."""
    if isinstance(window, bool) or not isinstance(window, (int, float)) or not 0.1 <= window <= 3600:
        raise ValueError(f"window must be a number of seconds in [0.1, 3600], got {window!r}")
    return float(window)


class AgentClock:
    """The agent's wall time inside portal calls (from a step's start to its results) and away.

    Sampled, as the servers' step times are: one call in ``AGENT_SAMPLE_EVERY`` has the time away
    before it and the time inside it measured; the others cost a counter. The shares come from
    the sampled calls, which are every kind of call alike.
    """

    __slots__ = ("inside", "away", "calls", "entered", "left", "next_tick", "on_tick")

    def __init__(self) -> None:
        self.inside = 0.0
        self.away = 0.0
        self.calls = 0
        self.entered: Optional[float] = None
        self.left: Optional[float] = None
        self.next_tick = time.perf_counter() + SNAPSHOT_EVERY_S
        self.on_tick: Optional[Callable[[], None]] = None

    def enter(self) -> None:
        left = self.left
        if left is not None:  # the call before left on a sampled step: this one is measured
            now = time.perf_counter()
            self.away += now - left
            self.left, self.entered = None, now

    def leave(self) -> None:
        self.calls += 1
        entered = self.entered
        if entered is not None:
            now = time.perf_counter()
            self.inside += now - entered
            self.entered = None
            if now >= self.next_tick:
                self.next_tick = now + SNAPSHOT_EVERY_S
                if self.on_tick is not None:
                    self.on_tick()
        elif not self.calls & (AGENT_SAMPLE_EVERY - 1):
            self.left = time.perf_counter()


def clock_now(clock: AgentClock) -> tuple[float, float, float, int]:
    """(wall, sampled time inside, sampled time away, calls) of a clock now."""
    return time.perf_counter(), clock.inside, clock.away, clock.calls


ClockReading = tuple[float, float, float, int]


class ClockHistory:
    """Snapshots of an ``AgentClock`` for the agent's shares over a window (remote portals)."""

    def __init__(self, clock: AgentClock) -> None:
        self.clock = clock
        self.start = clock_now(clock)
        self.history: deque[ClockReading] = deque(maxlen=int(WINDOW_S * 4 / SNAPSHOT_EVERY_S) + 4)
        clock.on_tick = self.keep

    def keep(self) -> None:
        self.history.append(clock_now(self.clock))

    def shares(self, window: float) -> tuple[dict[str, float], dict[str, float]]:
        """The agent's shares (inside, away, calls/s) over ``window`` and since the start."""
        now = clock_now(self.clock)
        self.history.append(now)
        older = [s for s in (self.start, *self.history) if min(window, 0.2) <= now[0] - s[0] <= window]
        return _shares(older[0] if older else self.start, now), _shares(self.start, now)


def _shares(a: ClockReading, b: ClockReading) -> dict[str, float]:
    span = max(b[0] - a[0], 1e-9)
    inside, away = b[1] - a[1], b[2] - a[2]
    total = max(inside + away, 1e-9)
    return {"inside": inside / total, "away": away / total, "calls_per_s": (b[3] - a[3]) / span, "window_s": span}
