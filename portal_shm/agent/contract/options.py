"""The options of a vector portal, validated once for every kind: ``VectorOptions``.

A local ``VectorPortal`` takes them as keyword arguments (AsyncVectorEnv's signature, and ours); a
remote or Ray portal as ``vector_kwargs``, which its hosts' local portals apply; an env host checks
what an agent sends it with the same rules under its own bounds (``HOST_BOUNDS``: what would make
it allocate). One table of checks (``CHECKS``) says what each option takes and the error names the
option and what a valid value is.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Optional

import numpy as np
from gymnasium.vector import AutoresetMode

from ...errors import did_you_mean

DEFAULT_RING_DEPTH = 4  # batches the ring holds (remote lockstep replies reuse as many arrays)
DEFAULT_INFO_CAPACITY = 4096
POLICIES = ("raise", "restart")
DEFAULT_WAIT_STEPS = 100
DEFAULT_MAX_PER_STEP = 2
KEYS = ("episodes", "rss_mb", "seconds", "slowdown", "jitter", "wait_steps", "max_per_step", "spare")
SPARES = ("fork", "start")
RULES = ("episodes", "rss_mb", "seconds", "slowdown")
INFOS = ("exact", "lossy")
SERVER_STARTS = ("fork", "fresh")


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


# -- the options of a portal ---------------------------------------------------------------------


@dataclass(frozen=True)
class Bounds:
    """The largest values of the options that make a portal allocate or wait (None: unbounded)."""

    ring_depth: Optional[int] = None
    info_capacity: Optional[int] = None
    startup_timeout: Optional[float] = None
    step_timeout: Optional[float] = None
    max_restarts: Optional[int] = None


UNBOUNDED = Bounds()
#: What an env host lets an agent ask of its local portal.
HOST_BOUNDS = Bounds(
    ring_depth=16, info_capacity=1 << 16, startup_timeout=3600, step_timeout=24 * 3600, max_restarts=1000
)

Check = Callable[[Any, int, Bounds], Optional[str]]


def _integer(low: int, high: Callable[[int, Bounds], Optional[float]], none: bool = False) -> Check:
    def check(value: Any, num_envs: int, bounds: Bounds) -> Optional[str]:
        if value is None and none:
            return None
        top = high(num_envs, bounds)
        if (
            isinstance(value, bool)
            or not isinstance(value, (int, np.integer))
            or value < low
            or (top is not None and value > top)
        ):
            wanted = f"an integer from {low} to {top}" if top is not None else f"an integer of at least {low}"
            return wanted + (", or None" if none else "")
        return None

    return check


def _seconds(high: Callable[[Bounds], Optional[float]], none: bool, zero: bool = False) -> Check:
    def check(value: Any, num_envs: int, bounds: Bounds) -> Optional[str]:
        if value is None and none:
            return None
        top = high(bounds)
        if (
            isinstance(value, bool)
            or not isinstance(value, (int, float))
            or not (value >= 0 if zero else value > 0)
            or (top is not None and value > top)
            or math.isnan(value)
        ):
            wanted = "seconds " + ("of at least 0" if zero else "above 0") + (f" and at most {top:g}" if top else "")
            return wanted + (", or None" if none else "")
        return None

    return check


def _choice(*names: Any) -> Check:
    def check(value: Any, num_envs: int, bounds: Bounds) -> Optional[str]:
        return None if value in names else "one of " + ", ".join(repr(n) for n in names)

    return check


def _recycle(value: Any, num_envs: int, bounds: Bounds) -> Optional[str]:
    try:
        check_recycle(value)
    except (TypeError, ValueError) as exc:
        return f"a recycle policy ({exc})"
    return None


def _autoreset(value: Any, num_envs: int, bounds: Bounds) -> Optional[str]:
    if isinstance(value, AutoresetMode) or value in [mode.value for mode in AutoresetMode]:
        return None
    return "one of " + ", ".join(repr(mode.value) for mode in AutoresetMode) + " (or a gymnasium AutoresetMode)"


#: Option -> check(value, num_envs, bounds): None when valid, else what a valid value is.
CHECKS: dict[str, Check] = {
    "autoreset_mode": _autoreset,
    "batch_size": _integer(1, lambda n, b: n, none=True),
    "envs_per_server": _integer(1, lambda n, b: n, none=True),
    "ring_depth": _integer(2, lambda n, b: b.ring_depth),
    "info_capacity": _integer(16, lambda n, b: b.info_capacity),
    "startup_timeout": _seconds(lambda b: b.startup_timeout, none=False),
    "step_timeout": _seconds(lambda b: b.step_timeout, none=True),
    "on_env_failure": _choice(*POLICIES),
    "max_restarts": _integer(0, lambda n, b: b.max_restarts),
    "recycle": _recycle,
    "spin_wait": _seconds(lambda b: None, none=True, zero=True),
    "max_ring_bytes": _integer(1, lambda n, b: None, none=True),
    "infos": _choice(*INFOS),
    "server_start": _choice(*SERVER_STARTS),
}
#: The options an agent's hosts apply (the others are the agent's own, or the host operator's).
HOSTED = (
    "autoreset_mode",
    "batch_size",
    "envs_per_server",
    "step_timeout",
    "startup_timeout",
    "info_capacity",
    "ring_depth",
    "on_env_failure",
    "max_restarts",
    "recycle",
    "infos",
    "server_start",
)


@dataclass(frozen=True)
class VectorOptions:
    """A portal's options, checked (``of``): the same rules for every kind and on env hosts."""

    autoreset_mode: AutoresetMode = AutoresetMode.NEXT_STEP
    batch_size: Optional[int] = None
    envs_per_server: Optional[int] = None
    ring_depth: int = DEFAULT_RING_DEPTH
    info_capacity: int = DEFAULT_INFO_CAPACITY
    startup_timeout: float = 120.0
    step_timeout: Optional[float] = None
    on_env_failure: str = "raise"
    max_restarts: int = 3
    recycle: Optional[RecyclePolicy] = None
    spin_wait: Optional[float] = None
    max_ring_bytes: Optional[int] = None
    #: Info values msgpack cannot carry exactly, from runtimes that are a trust boundary (docker,
    #: remote hosts, Ray, attach): "exact" refuses them (``InfoEncodingError``), "lossy" converts
    #: them (an enum member to its value, a namedtuple to a tuple, anything else to its repr()).
    #: Process, venv and micromamba runtimes carry them exactly either way (``wire/info_codec.py``).
    infos: str = "exact"
    #: How env servers start: "fork" (default) forks them from a warm zygote of their runtime
    #: where it can (``agent/local/zygotes.py``); "fresh" starts each as a new interpreter.
    server_start: str = "fork"

    @classmethod
    def of(
        cls, num_envs: int, values: Any, bounds: Bounds = UNBOUNDED, allowed: tuple[str, ...] = tuple(CHECKS)
    ) -> VectorOptions:
        """``values`` (a dict of some options) checked: ``TypeError`` for a name not in ``allowed``,
        ``ValueError`` naming the option and what a valid value is."""
        if not isinstance(values, dict):
            raise TypeError(f"vector_kwargs must be a dict, got {type(values).__name__}")
        for key, value in values.items():
            if not isinstance(key, str) or key not in allowed:
                where = "an env host takes" if allowed == HOSTED else "a portal takes"
                hint = did_you_mean(key, allowed)
                raise TypeError(
                    f"vector_kwargs key {str(key)[:100]!r} is not one {where}{hint + ' It' if hint else '; it'} "
                    f"takes {', '.join(allowed)}"
                    + (" (and copy, which the agent applies itself)" if allowed == HOSTED else "")
                )
            wanted = CHECKS[key](value, num_envs, bounds)
            if wanted is not None:
                text = repr(value)
                raise ValueError(f"vector_kwargs {key}={text if len(text) <= 60 else text[:57] + '...'}: give {wanted}")
        out = dict(values)
        if "autoreset_mode" in out:
            out["autoreset_mode"] = AutoresetMode(out["autoreset_mode"])
        if "recycle" in out:
            out["recycle"] = check_recycle(out["recycle"])
        options = cls(**out)
        options._check_together(num_envs)
        return options

    def _check_together(self, num_envs: int) -> None:
        """The rules between options: what async batches cannot have."""
        if self.batch_size is None or self.batch_size == num_envs:
            return
        if self.autoreset_mode is AutoresetMode.DISABLED:
            raise ValueError(
                "batch_size needs autoreset (NEXT_STEP or SAME_STEP): with DISABLED a finished env "
                "could only be reset by a masked reset, which async batches do not have"
            )
        if self.recycle is not None:
            raise ValueError(
                "recycle is for lockstep portals: with batch_size the servers step in different "
                "slots of the ring; make the portal without batch_size to recycle its servers"
            )
