"""Statistics over repeated, interleaved runs: medians with min/max, and ratios taken pair by pair.

Runs are interleaved (A B C, A B C, ...), so run ``i`` of every system of a cell saw about the
same machine. A ratio to a baseline is therefore taken per round, ``A[i] / baseline[i]``, and the
median of those ratios is reported (with their min and max): noise that hit a whole round
cancels, which a ratio of two medians would not do.
"""

from __future__ import annotations

import math
from typing import Iterable, Optional

import numpy as np

from .options import is_portal


def spread(values: Iterable[Optional[float]]) -> Optional[dict]:
    """``{"median", "min", "max", "n"}`` of the finite values, or None when there are none."""
    finite = [float(v) for v in values if v is not None and math.isfinite(v)]
    if not finite:
        return None
    return {"median": float(np.median(finite)), "min": min(finite), "max": max(finite), "n": len(finite)}


def paired_ratios(numerator: dict, denominator: dict) -> list:
    """``numerator[r] / denominator[r]`` for every round ``r`` both have (dicts: round -> value)."""
    return [
        numerator[r] / denominator[r]
        for r in sorted(numerator)
        if r in denominator and denominator[r] and numerator[r] is not None
    ]


def by_round(samples: list, key: str = "steps_per_s") -> dict:
    return {s["repeat"]: s[key] for s in samples}


def summarize(
    samples: list,
    baseline: str,
    systems_order: list,
    allocations: Optional[list] = None,
    startups: Optional[list] = None,
) -> list:
    """One row per (scenario, N, system), in the order the scenarios ran, N ascending, systems in
    ``systems_order``. ``x_baseline`` and ``x_ceiling`` are spreads of pair-by-pair ratios."""
    groups: dict = {}
    for s in samples:
        groups.setdefault((s["scenario"], s["num_envs"], s["system"]), []).append(s)
    alloc_of = {(a["scenario"], a["num_envs"], a["system"]): a for a in allocations or []}
    startup_of = {(a["scenario"], a["num_envs"], a["system"]): a["seconds"] for a in startups or []}
    scenario_order = list(dict.fromkeys(s["scenario"] for s in samples))
    rank = {name: i for i, name in enumerate(systems_order)}
    rows = []
    for (name, n, system), group in sorted(
        groups.items(),
        key=lambda kv: (scenario_order.index(kv[0][0]), kv[0][1], rank.get(kv[0][2], len(rank)), kv[0][2]),
    ):
        rounds = by_round(group)
        base = groups.get((name, n, baseline))
        ceiling = groups.get((name, n, "ceiling"))
        rows.append(
            {
                "scenario": name,
                "num_envs": n,
                "system": system,
                "repeats": len(group),
                "steps_per_s": spread(rounds.values()),
                "p50_us": _median(s.get("p50_us") for s in group),
                "p99_us": _median(s.get("p99_us") for s in group),
                "agent_cpu": _median(s.get("agent_cpu") for s in group),
                "cpu_s_per_1k_steps": _median(s.get("cpu_s_per_1k_steps") for s in group),
                "x_baseline": spread(paired_ratios(rounds, by_round(base))) if base else None,
                "x_ceiling": spread(paired_ratios(rounds, by_round(ceiling))) if ceiling else None,
                "alloc": alloc_of.get((name, n, system)),
                "startup_s": startup_of.get((name, n, system)),
            }
        )
    return rows


def _median(values: Iterable[Optional[float]]) -> Optional[float]:
    found = spread(values)
    return None if found is None else found["median"]


def row_of(rows: list, scenario: str, num_envs: int, system: str) -> Optional[dict]:
    return next((r for r in rows if (r["scenario"], r["num_envs"], r["system"]) == (scenario, num_envs, system)), None)


def pair_ratio(samples: list, scenario: str, num_envs: int, system: str, baseline: str) -> Optional[dict]:
    """Spread of ``system[i] / baseline[i]`` over the rounds of one cell."""

    def rounds(name: str) -> dict:
        return by_round(
            [s for s in samples if (s["scenario"], s["num_envs"], s["system"]) == (scenario, num_envs, name)]
        )

    return spread(paired_ratios(rounds(system), rounds(baseline)))


def targets(rows: list, samples: list) -> list:
    """The project's checks at N=8 (from its issues), where the rows they need were measured."""
    found = []
    for row in (r for r in rows if r["num_envs"] == 8):
        name, system = row["scenario"], row["system"]
        if system == "portal-process" and name.startswith("null:"):
            ratio = pair_ratio(samples, name, 8, system, "async")
            if ratio:
                found.append(_target(f"{name} N=8: portal-process >= 5x async", ratio["median"], 5.0))
        if is_portal(system) and row["x_ceiling"]:
            found.append(_target(f"{name} N=8: {system} >= 0.8x ceiling", row["x_ceiling"]["median"], 0.8))
        if system == "portal-docker":
            ratio = pair_ratio(samples, name, 8, system, "portal-process")
            if ratio:
                found.append(_target(f"{name} N=8: portal-docker within 3% of portal-process", ratio["median"], 0.97))
    for row in rows:
        if row["alloc"]:
            found.append(_alloc_target(row))
    return found


def _alloc_target(row: dict) -> dict:
    """Ring views (``copy=False``) allocate nothing observation-sized; the default (fresh arrays)
    allocates one batch per step, which the client owns, and keeps none of them itself."""
    alloc, where = row["alloc"], f"{row['scenario']} N={row['num_envs']}: {row['system']}"
    if row["system"] == "portal-views":
        bad = alloc["steps_with_obs_sized_alloc"] + max(alloc["retained_obs_sized_blocks"], 0)
        return {
            "target": f"{where} 0 obs-sized allocations per step",
            "value": bad / max(alloc["steps"], 1),
            "ok": bad == 0,
        }
    batch = row["num_envs"] * alloc["obs_bytes"] + _PYTHON_SLACK
    ok = alloc["mean_transient_bytes"] <= batch and alloc["retained_obs_sized_blocks"] <= 0
    return {
        "target": f"{where} one batch of fresh arrays per step, none retained",
        "value": alloc["mean_transient_bytes"] / batch,
        "ok": ok,
    }


_PYTHON_SLACK = 16384  # a step's own Python objects (infos, tuples) besides the observation batch


def _target(text: str, value: float, threshold: float) -> dict:
    return {"target": text, "value": value, "ok": value >= threshold}
