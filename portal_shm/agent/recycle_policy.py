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

import math
import time
from dataclasses import dataclass
from typing import Any, Optional

import numpy as np

SPARE_AT = 0.8  # the share of a limit at which the warm spare is started
EARLY_SAMPLES = 8  # sampled steps (each server samples one step in 64) that make the early step time
ROLL_SAMPLES = 8  # and each rolling window after it
DEFAULT_WAIT_STEPS = 100
DEFAULT_MAX_PER_STEP = 2
KEYS = ("episodes", "rss_mb", "seconds", "slowdown", "jitter", "wait_steps", "max_per_step", "spare")
SPARES = ("fork", "start")
RULES = ("episodes", "rss_mb", "seconds", "slowdown")


@dataclass(frozen=True)
class RecyclePolicy:
    """A checked ``recycle`` option: the rules (None: not used) and how swaps are spread.

    ``wait_steps``: a due server of several envs is swapped when all of them end an episode in the
    same step, or this many steps after it came due (with its spare ready), whichever comes first;
    the envs not at an episode end then carry on mid-episode from their state in the fresh server.
    """

    episodes: Optional[int] = None
    rss_mb: Optional[float] = None
    seconds: Optional[float] = None
    slowdown: Optional[float] = None
    jitter: float = 0.0
    wait_steps: int = DEFAULT_WAIT_STEPS
    max_per_step: int = DEFAULT_MAX_PER_STEP
    spare: str = "fork"

    def as_dict(self) -> dict[str, Any]:
        """The option as a user writes it (what a remote agent sends its host)."""
        return {key: getattr(self, key) for key in KEYS if getattr(self, key) is not None}


def _number(key: str, value: Any, low: float, integer: bool, inclusive: bool = False) -> float:
    kind = "an integer" if integer else "a number"
    bad = isinstance(value, bool) or not isinstance(value, (int, np.integer) if integer else (int, float, np.number))
    if bad or not math.isfinite(float(value)) or (value < low if inclusive else value <= low):
        bound = f">= {low:g}" if inclusive else f"> {low:g}"
        raise ValueError(f"recycle[{key!r}] must be {kind} {bound}, got {value!r}")
    return float(value)


def check_recycle(value: Any) -> Optional[RecyclePolicy]:
    """``vector_kwargs["recycle"]`` checked: None (no recycling) or a dict of some of ``KEYS``
    with at least one rule; every error names the key and what would be valid."""
    if value is None:
        return None
    if isinstance(value, RecyclePolicy):
        return value
    if not isinstance(value, dict):
        raise TypeError(
            f"recycle must be a dict such as {{'episodes': 100, 'jitter': 0.1}} or None, got {type(value).__name__}"
        )
    unknown = sorted(str(key) for key in value if key not in KEYS)
    if unknown:
        raise ValueError(f"recycle takes the keys {', '.join(KEYS)}; unknown: {', '.join(unknown)}")
    if not any(value.get(rule) is not None for rule in RULES):
        raise ValueError(f"recycle needs at least one rule of {', '.join(RULES)}, e.g. {{'episodes': 100}}")
    out: dict[str, Any] = {}
    for key in ("episodes", "wait_steps", "max_per_step"):
        if value.get(key) is not None:
            out[key] = int(_number(key, value[key], 0 if key == "wait_steps" else 1, True, inclusive=True))
    for key in ("rss_mb", "seconds"):
        if value.get(key) is not None:
            out[key] = float(_number(key, value[key], 0, False))
    if value.get("slowdown") is not None:
        out["slowdown"] = float(_number("slowdown", value["slowdown"], 1, False))
    if value.get("jitter") is not None:
        jitter = float(_number("jitter", value["jitter"], 0, False, inclusive=True))
        if jitter >= 1:
            raise ValueError(f"recycle['jitter'] must be below 1 (a share of each limit), got {jitter!r}")
        out["jitter"] = jitter
    if value.get("spare") is not None:
        if value["spare"] not in SPARES:
            raise ValueError(
                f"recycle['spare'] is 'fork' (spares forked from a zygote where the runtime allows, the default) "
                f"or 'start' (every spare a fresh runtime), got {value['spare']!r}"
            )
        out["spare"] = value["spare"]
    return RecyclePolicy(**out)


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
