"""When an env server is due to be recycled: the policy of ``vector_kwargs["recycle"]`` and its rules.

Long runs die of env rot (leaks, slow-downs) more than of crashes. Like gunicorn's
``--max-requests`` with jitter, a server is replaced by a fresh one when any rule holds:

- ``episodes``: its envs ended this many episodes (all of its envs together) since it started;
- ``rss_mb``: its resident memory passed this many MiB (read from ``/proc`` where the server is a
  process of this machine: local, venv and docker backends; on an env host, the host's);
- ``seconds``: it has run this long;
- ``slowdown``: its rolling step time (the env step times its server samples into the ring for
  ``stats()``) grew past this factor of its early step time.

``spare`` says how the warm spare is made: ``"fork"`` (the default) forks it from a zygote of the
server's runtime, which made the envs once (``zygotes.py``: milliseconds, where the backend's
servers are processes of this machine and the envs are safe to fork; otherwise a fresh start),
``"start"`` starts every spare as a fresh runtime, interpreter and imports and all.

``jitter`` spreads the episode and time limits of each server generation over ``±jitter`` of
their value, so servers started together do not come due together; ``max_per_step`` caps how many
servers are swapped in one step however many come due. This module is the decision logic only,
pure and cheap: ``recycler.py`` feeds it counts and does the swapping.
"""

from __future__ import annotations

import time
from typing import Optional

import numpy as np

from ..contract.options import RecyclePolicy

SPARE_AT = 0.8  # the share of a limit at which the warm spare is started
EARLY_SAMPLES = 8  # sampled steps (each server samples one step in 64) that make the early step time
ROLL_SAMPLES = 8  # and each rolling window after it


class Wear:
    """One server generation's wear against a policy: episodes, age, memory and step time.

    ``rng`` draws this generation's jittered limits; what is measured is passed in (``episodes``
    at every step, ``observe`` now and then), so the rules can be tested without any server.
    """

    def __init__(self, policy: RecyclePolicy, rng: np.random.Generator, now: Optional[float] = None) -> None:
        self.policy = policy
        self.started = time.monotonic() if now is None else now
        jitter = policy.jitter
        spread = [1.0 + float(rng.uniform(-jitter, jitter)) if jitter else 1.0 for _ in range(2)]
        self.episode_limit = None if policy.episodes is None else max(1, round(policy.episodes * spread[0]))
        self.seconds_limit = None if policy.seconds is None else policy.seconds * spread[1]
        self.episodes = 0
        self.rss_mb: Optional[float] = None
        self.early_ns: Optional[float] = None  # the early mean step time, once EARLY_SAMPLES are in
        self.rolling_ns: Optional[float] = None
        self._mark: Optional[tuple[int, int]] = None  # (samples, ns) where the current window began
        self.due_steps = 0  # steps since it came due with its spare ready (the wait_steps bound)

    def observe(self, rss_mb: Optional[float], samples: int, total_ns: int) -> None:
        """The server's resident memory and its envs' sampled step count and total time so far."""
        self.rss_mb = rss_mb
        if self._mark is None or samples < self._mark[0]:  # a generation's counts start from 0
            self._mark = (0, 0)
        count, ns = samples - self._mark[0], total_ns - self._mark[1]
        window = EARLY_SAMPLES if self.early_ns is None else ROLL_SAMPLES
        if count >= window:
            mean = ns / count
            if self.early_ns is None:
                self.early_ns = mean
            else:
                self.rolling_ns = mean
            self._mark = (samples, total_ns)

    def progress(self, now: Optional[float] = None) -> tuple[float, str]:
        """(the largest share of a limit reached, that rule's reason): 1 or more means due."""
        policy = self.policy
        now = time.monotonic() if now is None else now
        shares: list[tuple[float, str]] = [(0.0, "")]
        if self.episode_limit is not None:
            # The episode under way counts for the spare: with a limit of 1 it starts at once.
            ended, limit = self.episodes, self.episode_limit
            shares.append((ended / limit if ended >= limit else min((ended + 1) / limit, 0.99), f"{ended} episodes"))
        if self.seconds_limit is not None:
            shares.append(((now - self.started) / self.seconds_limit, f"{now - self.started:.0f} s old"))
        if policy.rss_mb is not None and self.rss_mb is not None:
            shares.append((self.rss_mb / policy.rss_mb, f"RSS {self.rss_mb:.0f} MiB"))
        if policy.slowdown is not None and self.early_ns and self.rolling_ns is not None:
            ratio = self.rolling_ns / self.early_ns
            shares.append(((ratio - 1) / (policy.slowdown - 1), f"steps {ratio:.1f}x slower than at its start"))
        return max(shares)

    def due(self, now: Optional[float] = None) -> bool:
        return self.progress(now)[0] >= 1.0

    def due_after(self, episodes: int) -> bool:
        """Whether ``episodes`` more ended episodes make it due by the episode rule."""
        return self.episode_limit is not None and self.episodes + episodes >= self.episode_limit

    def near(self, now: Optional[float] = None) -> bool:
        """Whether its spare should be warming: some rule is past ``SPARE_AT`` of its limit."""
        return self.progress(now)[0] >= SPARE_AT
