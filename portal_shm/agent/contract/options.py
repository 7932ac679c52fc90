"""The options of a vector portal, validated once for every kind (local, remote, Ray) and on the env host."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Optional

import numpy as np

DEFAULT_RING_DEPTH = 4  # batches the ring holds (remote lockstep replies reuse as many arrays)


POLICIES = ("raise", "restart")


def check_policy(policy: str, max_restarts: int) -> None:
    """``on_env_failure`` and ``max_restarts`` as a portal, local or remote, accepts them."""
    if policy not in POLICIES:
        raise ValueError(f"on_env_failure must be one of {POLICIES}, got {policy!r}")
    if max_restarts < 0:
        raise ValueError(f"max_restarts must be >= 0, got {max_restarts}")


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
