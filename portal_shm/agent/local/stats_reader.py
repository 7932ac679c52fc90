"""``envs.stats()``: where the time goes, read from counters that cost the hot path nothing.

Each env server keeps its counts in its own rows of the ring (``wire/stats.py``); the agent
times only its own side (``AgentClock``: inside portal calls or away from them). A report
compares two snapshots: now, and the oldest one kept within the window; snapshots are taken
whenever stats are read and once a second as the portal steps (``tick``). What servers wrote is
untrusted: counts are clamped to non-negative, and a count that went down (a restarted server
starts again from 0) carries the old total forward.
"""

from __future__ import annotations

import os
from collections import deque
from typing import Any, Callable, Optional

import numpy as np

from ...wire import stats as ring_stats
from ..stats.bound import verdict
from ..stats.clock import SNAPSHOT_EVERY_S, WINDOW_S, AgentClock, check_window, clock_now
from .session import ServerLink

_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


class Snapshot:
    """Counters at one moment: per env, per server, the agent's clock, the servers' CPU."""

    def __init__(
        self,
        wall: float,
        env: np.ndarray,
        hist: np.ndarray,
        server: np.ndarray,
        cpu: list[Optional[float]],
        rss: list[Optional[int]],
        clock: tuple[float, float, int],
        restarts: list[int],
        recycles: Optional[list[int]] = None,
    ) -> None:
        self.wall, self.env, self.hist, self.server = wall, env, hist, server
        self.cpu, self.rss, self.clock, self.restarts = cpu, rss, clock, restarts
        self.recycles = recycles or [0] * len(restarts)


class Monotone:
    """Totals of counters that may start again from 0 (a restarted server): what went before is kept."""

    def __init__(self, shape: tuple[int, ...]) -> None:
        self.last = np.zeros(shape, np.int64)
        self.base = np.zeros(shape, np.int64)

    def update(self, raw: np.ndarray) -> np.ndarray:
        raw = np.maximum(raw, 0)
        dropped = raw < self.last
        self.base[dropped] += self.last[dropped]
        self.last = raw
        total: np.ndarray = self.base + raw
        return total


def process_cpu(pid: Optional[int]) -> tuple[Optional[float], Optional[int]]:
    """(CPU seconds used, resident bytes) of a process on this machine, or Nones where unknown."""
    if not pid:
        return None, None
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            fields = handle.read().rsplit(b")", 1)[1].split()
        with open(f"/proc/{pid}/statm", "rb") as handle:
            rss = int(handle.read().split()[1]) * _PAGE
        return (int(fields[11]) + int(fields[12])) / _TICKS, rss
    except (OSError, IndexError, ValueError):
        return None, None


class StatsReader:
    """Snapshots of one local portal's counters, and reports over a window of them."""

    def __init__(
        self,
        views: dict[str, np.ndarray],
        servers: list[ServerLink],
        clock: AgentClock,
        restarts: Callable[[], list[int]],
        bytes_per_env_step: int,
        recycles: Optional[Callable[[], list[int]]] = None,
    ) -> None:
        self.views = views
        self.servers = servers
        self.clock = clock
        self.restarts = restarts
        self.recycles = recycles or (lambda: [0] * len(restarts()))
        self.bytes_per_env_step = bytes_per_env_step
        num_envs = views["env_stats"].shape[0]
        self.env_totals = Monotone((num_envs, len(ring_stats.ENV_FIELDS)))
        self.hist_totals = Monotone((num_envs, ring_stats.BUCKETS))
        self.server_totals = Monotone((len(servers), len(ring_stats.SERVER_FIELDS)))
        self._pids: dict[tuple[int, int], Optional[int]] = {}
        self.start = self.snapshot()
        self.history: deque[Snapshot] = deque(maxlen=int(WINDOW_S * 4 / SNAPSHOT_EVERY_S) + 4)

    def _pid(self, server: ServerLink) -> Optional[int]:
        key = (server.index, server.generation)
        if key not in self._pids:
            self._pids[key] = server.handle.host_pid() if server.handle is not None else None
        pid: Optional[int] = self._pids[key]
        return pid

    def snapshot(self) -> Snapshot:
        cpu, rss = [], []
        for server in self.servers:
            used, resident = process_cpu(self._pid(server))
            cpu.append(used)
            rss.append(resident)
        now, inside, away, calls = clock_now(self.clock)
        env, server_stats = self.views["env_stats"].copy(), self.views["server_stats"].copy()
        for server in self.servers:  # steps are the agent's own count: the step commands it posted
            steps = server.seq - server.controls
            env[server.rows, ring_stats.STEPS] = steps
            server_stats[server.index, ring_stats.SERVER_STEPS] = steps
        return Snapshot(
            now,
            self.env_totals.update(env),
            self.hist_totals.update(self.views["env_hist"].copy()),
            self.server_totals.update(server_stats),
            cpu,
            rss,
            (inside, away, calls),
            list(self.restarts()),
            list(self.recycles()),
        )

    def keep(self) -> None:
        """Take a snapshot into the window's history (the portal does once a second)."""
        self.history.append(self.snapshot())

    def report(self, window: float = WINDOW_S) -> dict[str, Any]:
        window = check_window(window)
        self.keep()
        now = self.history[-1]
        older = [s for s in (self.start, *self.history) if min(window, 0.2) <= now.wall - s.wall <= window]
        base = older[0] if older else self.start
        out = self._between(base, now)
        out["since_start"] = self._between(self.start, now, brief=True)
        out["bound"] = verdict(out)
        return out

    def _between(self, a: Snapshot, b: Snapshot, brief: bool = False) -> dict[str, Any]:
        span = max(b.wall - a.wall, 1e-9)
        env = b.env - a.env
        steps = env[:, ring_stats.STEPS]
        inside = b.clock[0] - a.clock[0]
        away = b.clock[1] - a.clock[1]
        total = max(inside + away, 1e-9)
        report: dict[str, Any] = {
            "window_s": span,
            "steps": int(steps.sum()),
            "steps_per_s": float(steps.sum()) / span,
            "episodes": int(env[:, ring_stats.EPISODES].sum()),
            "agent": {
                "inside": inside / total,
                "away": away / total,
                "calls_per_s": (b.clock[2] - a.clock[2]) / span,
            },
            "ring": {"bytes_per_s": float(steps.sum()) * self.bytes_per_env_step / span},
        }
        if brief:
            return report
        hist = b.hist - a.hist
        server_of: dict[int, int] = {}
        servers = []
        busy = b.server - a.server
        for server in self.servers:
            for i in server.env_indices:
                server_of[i] = server.index
            j = server.index
            cpu, used, before, rss = None, b.cpu[j], a.cpu[j], b.rss[j]
            if used is not None and before is not None and used >= before:
                cpu = (used - before) / span
            servers.append(
                {
                    "server": j,
                    "envs": list(server.env_indices),
                    "pid": self._pid(server),
                    "steps_per_s": float(busy[j, ring_stats.SERVER_STEPS]) / span,
                    "busy": min(1.0, float(busy[j, ring_stats.BUSY_NS]) / 1e9 / span),
                    "cpu": cpu,
                    "rss_mb": None if rss is None else rss / 2**20,
                    "hosting": (getattr(server, "hello", None) or {}).get("hosting"),
                    "startup_s": server.startup_s,
                    "forked": server.forked(),
                }
            )
        envs = []
        for i in range(env.shape[0]):
            envs.append(
                {
                    "env": i,
                    "server": server_of.get(i),
                    "steps": int(b.env[i, ring_stats.STEPS]),
                    "episodes": int(b.env[i, ring_stats.EPISODES]),
                    "resets": int(b.env[i, ring_stats.RESETS]),
                    "restarts": int(b.restarts[i]) if i < len(b.restarts) else 0,
                    "recycles": int(b.recycles[i]) if i < len(b.recycles) else 0,
                    "steps_per_s": float(steps[i]) / span,
                    "latency_us": latency(hist[i], int(env[i, ring_stats.SAMPLED]), int(env[i, ring_stats.SAMPLED_NS])),
                }
            )
        report["envs"] = envs
        report["servers"] = servers
        return report


def latency(hist: np.ndarray, samples: int, total_ns: int) -> Optional[dict[str, float]]:
    """p50/p90/p99 and the mean (µs) of one env's sampled step durations, or None without samples."""
    count = int(hist.sum())
    if count <= 0 or samples <= 0:
        return None
    cumulative = np.cumsum(hist)
    out: dict[str, float] = {"samples": count, "mean": total_ns / samples / 1e3}
    for name, q in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99)):
        index = int(np.searchsorted(cumulative, q * count))
        index = min(index, ring_stats.BUCKETS - 1)
        low, high = ring_stats.bucket_bounds(index)
        before = int(cumulative[index - 1]) if index else 0
        inside = max(int(hist[index]), 1)
        fraction = min(max((q * count - before) / inside, 0.0), 1.0)
        out[name] = (low + (high - low) * fraction) / 1e3
    return out
