"""One point of a ``portal-shm tune`` search as it is built and measured: its portal while it is
built (with the agent's compute after every step, ``PolicyLoad``), the rates of its runs, its
start-up time and its servers' memory, and the entry the report lists for it.
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass, field
from typing import Any, Optional

from .cpu import descendants
from .tune_space import Point


class PolicyLoad:
    """The vector env with the agent's compute after every ``step`` and ``recv``: ``seconds`` of
    busy-waiting, which holds a core as a policy's forward does (``bench.tune``'s module docstring
    says why not a sleep). Everything else passes through."""

    def __init__(self, envs: Any, seconds: float) -> None:
        self.envs, self.seconds = envs, seconds

    def _think(self) -> None:
        end = time.perf_counter() + self.seconds
        while time.perf_counter() < end:
            pass

    def step(self, actions: Any) -> Any:
        result = self.envs.step(actions)
        self._think()
        return result

    def recv(self) -> Any:
        result = self.envs.recv()
        self._think()
        return result

    def __getattr__(self, name: str) -> Any:
        return getattr(self.envs, name)


@dataclass
class Candidate:
    """One point of a search: its portal while it is built, and everything measured on it."""

    point: Point
    phase: str  # "screen" (a layout) or "variant" (another spin or ring setting of a top layout)
    envs: Any = None
    actions: Optional[list] = None
    startup_s: Optional[float] = None
    server_rss_bytes: Optional[int] = None
    screen: Optional[dict] = None
    refine: dict = field(default_factory=dict)  # round -> steps/s
    error: Optional[str] = None

    @property
    def screen_rate(self) -> float:
        return self.screen["steps_per_s"] if self.screen else -math.inf

    @property
    def refine_rate(self) -> Optional[float]:
        return statistics.median(self.refine.values()) if self.refine else None

    def entry(self, num_envs: int, reference: Point, won: bool) -> dict:
        """The candidate as the report lists it under ``measured`` (``reference``: the default layout)."""
        screen = self.screen or {}
        return {
            "vector_kwargs": self.point.vector_kwargs(),
            "label": self.point.label(num_envs),
            "phase": self.phase,
            "default": self.point == reference,
            "winner": won,
            "steps_per_s": self.refine_rate if self.refine else screen.get("steps_per_s"),
            "screen_steps_per_s": screen.get("steps_per_s"),
            "refine_steps_per_s": self.refine_rate,
            "refine_rounds": [self.refine[r] for r in sorted(self.refine)],
            "p50_us": screen.get("p50_us"),
            "cpu_s_per_1k_steps": screen.get("cpu_s_per_1k_steps"),
            "startup_s": self.startup_s,
            "server_rss_bytes": self.server_rss_bytes,
            "error": self.error,
        }


def rss_bytes(pids: list) -> Optional[int]:
    """Resident memory of these processes and everything under them (/proc, Linux), None elsewhere."""
    total, seen = 0, False
    for pid in set(pids) | descendants(pids):
        try:
            with open(f"/proc/{pid}/status") as f:
                line = next((row for row in f if row.startswith("VmRSS:")), None)
        except OSError:
            continue
        if line:
            total += int(line.split()[1]) * 1024
            seen = True
    return total if seen else None
