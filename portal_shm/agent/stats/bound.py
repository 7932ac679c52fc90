"""The bottleneck verdict of a stats report: what holds the run back, and the figures that say so.

The rules, in order (the first that holds is the verdict):

1. ``"agent"``: the agent spends at least half its time away from the portal (``agent.away``):
   the envs wait for the policy or learner; more envs or faster agent code help, the envs do not.
2. ``"straggler"``: envs whose median step takes at least ``STRAGGLER_RATIO`` times the median of
   all envs' medians (and ``STRAGGLER_MIN_US`` more): in lockstep every batch waits for them.
   Named in ``envs``. Needs ``MIN_SAMPLES`` sampled steps per env.
3. ``"env"``: some env server is busy stepping its envs at least ``ENV_BUSY`` of the time: the
   envs' own work is the limit; more cores, more servers or cheaper envs help.
4. ``"transport"``: the agent waits on envs that are mostly idle: the time goes to wake-ups,
   the ring, messages or the network; fewer, larger servers, spinning (``spin_wait``), async
   batches (``batch_size``) or, remotely, compression and larger batches help.

``None`` with ``why`` while the window holds too little to say (under ``MIN_CALLS`` calls).
"""

from __future__ import annotations

import statistics
from typing import Any, Optional

AWAY = 0.5
STRAGGLER_RATIO = 3.0
STRAGGLER_MIN_US = 20.0
ENV_BUSY = 0.6
MIN_SAMPLES = 5
MIN_CALLS = 10


def verdict(report: dict[str, Any]) -> dict[str, Any]:
    """``{"verdict", "envs", "why", "figures"}`` for a report of ``StatsReader`` (or a merged one)."""
    agent = report["agent"]
    calls = agent["calls_per_s"] * report["window_s"]
    figures: dict[str, Any] = {"away": round(agent["away"], 3), "inside": round(agent["inside"], 3)}
    if calls < MIN_CALLS:
        return _say(None, [], f"only {calls:.0f} portal calls in the window: too few to judge", figures)
    if agent["away"] >= AWAY:
        return _say(
            "agent",
            [],
            f"the agent spent {agent['away']:.0%} of its time away from the portal: the envs wait for it",
            figures,
        )
    medians = {
        e["env"]: e["latency_us"]["p50"]
        for e in report.get("envs", [])
        if e.get("latency_us") and e["latency_us"]["samples"] >= MIN_SAMPLES
    }
    if len(medians) >= 2:
        typical = statistics.median(medians.values())
        slow = [
            i for i, p50 in medians.items() if p50 >= STRAGGLER_RATIO * typical and p50 - typical >= STRAGGLER_MIN_US
        ]
        figures["median_step_us"] = round(typical, 1)
        if slow:
            worst = max(medians[i] for i in slow)
            figures["straggler_step_us"] = [[i, round(medians[i], 1)] for i in sorted(slow)]
            return _say(
                "straggler",
                sorted(slow),
                f"env(s) {sorted(slow)} take up to {worst:.0f} µs a step against a median of {typical:.0f} µs",
                figures,
            )
    busy = [s["busy"] for s in report.get("servers", []) if s.get("busy") is not None]
    busiest: Optional[float] = max(busy) if busy else None
    if busiest is not None:
        figures["server_busy"] = round(busiest, 3)
    if busiest is not None and busiest >= ENV_BUSY:
        return _say("env", [], f"an env server is busy stepping its envs {busiest:.0%} of the time", figures)
    share = "" if busiest is None else f" (the busiest server steps {busiest:.0%} of the time)"
    return _say(
        "transport",
        [],
        f"the agent waits on the envs {agent['inside']:.0%} of its time while they are mostly idle{share}",
        figures,
    )


def _say(what: Optional[str], envs: list[int], why: str, figures: dict[str, Any]) -> dict[str, Any]:
    return {"verdict": what, "envs": envs, "why": why, "figures": figures}
