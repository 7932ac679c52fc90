"""Whether a scenario's env is so cheap that every parallel runner is bound by its transport.

An env that steps in microseconds (CartPole) leaves a vector env little to parallelise: the time
goes to moving actions and results between the agent and the envs, so the runners rank by their
transports, and one that steps in the agent's own process can beat those that wake another
process every step. The table says so in one line, so that the ranking is read as what it is.

The env's own step costs ``1 / raw`` (``raw``: one env in a plain loop in the agent's process).
A runner that steps N envs on ``min(N, cores)`` cores at ``rate`` env-steps/s spends a share
``rate / raw / min(N, cores)`` of those cores' time inside the envs; the rest is its transport and
its own bookkeeping. When that share stays under ``CHEAP_SHARE`` for every runner that steps its
envs elsewhere (processes, threads, hosts; ``sync`` steps them one after another in the agent's
process and is left out), the env is cheap at that N.
"""

from __future__ import annotations

from .options import REFERENCES

CHEAP_SHARE = 1 / 3  # the env's own steps at most a third of a runner's time: its transport dominates
SERIAL = ("sync",)  # runners that step the envs one after another in the agent's process


def env_share(rate: float, raw: float, num_envs: int, cores: int) -> float:
    """The share of ``min(num_envs, cores)`` cores' time a runner at ``rate`` env-steps/s spends in
    an env whose plain loop makes ``raw`` steps/s."""
    return rate / raw / max(1, min(num_envs, cores))


def transport_bound(summary: list, cores: int) -> list:
    """One finding per scenario whose env is cheap at some N: ``{scenario, num_envs (the N where it
    is), env_step_us, env_share (the largest of any parallel runner there), text}``."""
    cells: dict = {}
    for row in summary:
        if row.get("steps_per_s"):
            cells.setdefault(row["scenario"], {}).setdefault(row["num_envs"], {})[row["system"]] = row["steps_per_s"][
                "median"
            ]
    found = []
    for scenario, by_n in cells.items():
        judged, cheap, shares, raws = 0, [], [], []
        for n, rates in sorted(by_n.items()):
            raw = rates.get("raw")
            parallel = [rate for system, rate in rates.items() if system not in REFERENCES + SERIAL]
            if not raw or not parallel:
                continue
            judged += 1
            share = max(env_share(rate, raw, n, cores) for rate in parallel)
            if share <= CHEAP_SHARE:
                cheap.append(n)
                shares.append(share)
                raws.append(raw)
        if cheap:
            found.append(finding(scenario, cheap, 1e6 / max(raws), max(shares), len(cheap) == judged))
    return found


def finding(scenario: str, num_envs: list, step_us: float, share: float, everywhere: bool = True) -> dict:
    at = "" if everywhere else f" at N={','.join(str(n) for n in num_envs)}"
    text = (
        f"{scenario} steps in ~{_us(step_us)} us: every parallel runner is bound by its transport here{at}, "
        f"not by the env (its own steps are at most {share:.0%} of their time); "
        "the gap between runners is the transport's cost"
    )
    return {"scenario": scenario, "num_envs": num_envs, "env_step_us": step_us, "env_share": share, "text": text}


def _us(value: float) -> str:
    return f"{value:.1f}" if value < 10 else f"{value:,.0f}"
