"""An env server's own counters: episodes, resets, sampled step latency and busy time.

Counted in Python where the step loop already is, copied into the server's rows of the ring
(``wire/stats.py``) every ``FLUSH_NS`` and when idle. Sampled steps go through ``Timed``
stand-ins of the envs, so the loop itself has no per-env timing branch.
"""

from __future__ import annotations

import time
from typing import Any, Optional

import numpy as np

from ..wire import stats as ring_stats


class Timed:
    """An env whose ``step`` and ``reset`` add their duration to ``counters.pending[j]``."""

    def __init__(self, env: Any, counters: "ServerCounters", j: int) -> None:
        self.env, self.counters, self.j = env, counters, j

    def __getattr__(self, name: str) -> Any:
        return getattr(self.env, name)

    def step(self, action: Any) -> Any:
        start = time.perf_counter_ns()
        try:
            return self.env.step(action)
        finally:
            self.counters.pending[self.j] += time.perf_counter_ns() - start

    def reset(self, **kwargs: Any) -> Any:
        start = time.perf_counter_ns()
        try:
            return self.env.reset(**kwargs)
        finally:
            self.counters.pending[self.j] += time.perf_counter_ns() - start


class ServerCounters:
    """The counts of one server's envs (``rows`` of the ring) and of the server itself."""

    def __init__(self, envs: list, views: Optional[dict], rows: Any, server_index: int) -> None:
        count = len(envs)
        self.busy_ns = 0
        self.flush_at = 0
        self.episodes = [0] * count
        self.resets = [0] * count
        self.sampled = [0] * count
        self.sampled_ns = [0] * count
        self.pending = [0] * count
        self.hist = [[0] * ring_stats.BUCKETS for _ in range(count)]
        self.timed = [Timed(env, self, j) for j, env in enumerate(envs)]
        self.rows = rows
        # Rings of agents older than these counters have no rows for them: nothing is written.
        self.views = None if views is None or "env_stats" not in views else views
        self.server_index = server_index

    def wrap(self, envs: list) -> None:
        """Time ``envs`` from now on: the server's stepping list changed (recording an env adds a
        stand-in to it), and a sampled step must go through the same stand-ins, timed."""
        self.timed = [Timed(env, self, j) for j, env in enumerate(envs)]

    def commit_sample(self) -> None:
        """End a sampled step: the durations the ``Timed`` envs collected, one sample per env; the
        server's busy time (its envs' own step time, counted as ``SAMPLE_EVERY`` steps like this
        one: the other steps take no clock reading at all); and, every ``FLUSH_NS``, the counts
        copied into the ring."""
        pending, hist, sampled, sampled_ns = self.pending, self.hist, self.sampled, self.sampled_ns
        busy = 0
        for j, ns in enumerate(pending):
            hist[j][ring_stats.bucket(ns)] += 1
            sampled[j] += 1
            sampled_ns[j] += ns
            busy += ns
            pending[j] = 0
        self.busy_ns += busy * ring_stats.SAMPLE_EVERY
        now = time.perf_counter_ns()
        if now >= self.flush_at:
            self.flush(now)

    def flush(self, now_ns: int) -> None:
        """Copy the counts into the ring (cheap, and only every ``FLUSH_NS``)."""
        self.flush_at = now_ns + ring_stats.FLUSH_NS
        views = self.views
        if views is None:
            return
        rows = self.rows
        env_stats = views["env_stats"]
        env_stats[rows, ring_stats.EPISODES] = self.episodes
        env_stats[rows, ring_stats.RESETS] = self.resets
        env_stats[rows, ring_stats.SAMPLED] = self.sampled
        env_stats[rows, ring_stats.SAMPLED_NS] = self.sampled_ns
        views["env_hist"][rows] = np.asarray(self.hist, dtype=np.int64)
        views["server_stats"][self.server_index, ring_stats.BUSY_NS] = self.busy_ns
        views["server_stats"][self.server_index, ring_stats.FLUSHED_NS] = time.monotonic_ns()
