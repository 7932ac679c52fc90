#!/usr/bin/env python
"""``portal-shm tune`` against an exhaustive grid over the same space, in one run.

For each case, tune runs as the CLI runs it (``--batch``, the default budget), then every point of
the space it searched (``tune_space.grid``: layouts x spin x ring depth) is built at once and run
interleaved for ``--rounds`` rounds of ``--seconds`` (order rotated each round), with the same
timing code (``Search.run``: the bench's ``runner.run_one``). tune's pick is looked up in that grid:
its median rate over the grid's best median is the figure (target >= 0.9), beside tune's wall time
(target < 120 s). The grid's best is the maximum of many noisy medians, so the fraction is, if
anything, pessimistic.

    python benchmarks/tune_vs_grid.py --out benchmarks/results/tune_vs_grid_2core.txt
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

from portal_shm.bench.tune import Candidate, Search, TuneOptions, tune
from portal_shm.bench.tune_space import grid

CASES = (("CartPole-v1", 8), ("CartPole-v1", 32), ("ALE/Pong-v5", 16))


def run_grid(env_id: str, num_envs: int, seconds: float, rounds: int, log) -> dict:
    """Median steps/s of every grid point, keyed by its ``vector_kwargs`` as JSON."""
    search = Search(TuneOptions(env_id, num_envs, batch=True))
    points = grid(num_envs, search.cores, True, spins=search.spins, ring_depths=search.depths)
    cands = [Candidate(p, "grid") for p in points]
    rates: dict = {}
    try:
        begin = time.perf_counter()
        for cand in cands:
            search.build(cand)
        log(f"  grid: {len(cands)} points built in {time.perf_counter() - begin:.0f} s, all alive at once")
        for r in range(rounds):
            shift = (r * len(cands)) // rounds
            for cand in cands[shift:] + cands[:shift]:
                cand.refine[r] = search.run(cand, seconds)["steps_per_s"]
            log(f"  grid: round {r + 1}/{rounds} done")
    finally:
        for cand in cands:
            search.close(cand)
    for cand in cands:
        runs = [cand.refine[r] for r in sorted(cand.refine)]
        rates[json.dumps(cand.point.vector_kwargs(), sort_keys=True)] = {
            "label": cand.point.label(num_envs),
            "median": statistics.median(runs),
            "min": min(runs),
            "max": max(runs),
        }
    return rates


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=1.5, help="seconds of each grid run (default 1.5)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved grid rounds (default 3)")
    parser.add_argument("--budget-s", type=float, default=120.0, help="tune's budget (default 120, its default)")
    parser.add_argument("--only", default=None, help="run only the cases of this env id")
    parser.add_argument("--out", default=None, help="also write the text report to this file")
    args = parser.parse_args()
    lines: list = []

    def log(text: str = "") -> None:
        print(text, flush=True)
        lines.append(text)

    log(f"# {time.strftime('%Y-%m-%d %H:%M %Z')}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}")
    log("# python " + " ".join(sys.argv))
    summary = []
    for env_id, n in CASES:
        if args.only and env_id != args.only:
            continue
        log(f"\n## {env_id} N={n}")
        begin = time.perf_counter()
        report = tune(TuneOptions(env_id, n, batch=True, budget_s=args.budget_s))
        tune_s = time.perf_counter() - begin
        log(
            f"  tune: {report['label']} {json.dumps(report['vector_kwargs'])} in {tune_s:.0f} s "
            f"({len(report['measured'])} of {report['plan']['space_points']} points measured), "
            f"{report['steps_per_s']:,.0f} steps/s in its refine pass"
        )
        rates = run_grid(env_id, n, args.seconds, args.rounds, log)
        ranked = sorted(rates.values(), key=lambda v: v["median"], reverse=True)
        pick = rates[json.dumps(report["vector_kwargs"], sort_keys=True)]
        for v in ranked:
            mark = " <- tune" if v is pick else ""
            log(f"  {v['label']:<28} {v['median']:>10,.0f} [{v['min']:,.0f}-{v['max']:,.0f}]{mark}")
        fraction = pick["median"] / ranked[0]["median"]
        rank = ranked.index(pick) + 1
        summary.append((env_id, n, tune_s, pick["label"], fraction, rank, len(ranked), ranked[0]["label"]))
        log(f"  pick / grid best: {fraction:.2f} (rank {rank} of {len(ranked)}; best {ranked[0]['label']})")
    log("\n| case | tune wall s (target < 120) | tune's pick | pick / grid best (target >= 0.9) | rank | grid best |")
    log("|---|---:|---|---:|---:|---|")
    for env_id, n, tune_s, label, fraction, rank, total, best in summary:
        log(f"| {env_id} N={n} | {tune_s:.0f} | {label} | {fraction:.2f} | {rank}/{total} | {best} |")
    if args.out:
        with open(args.out, "w") as f:
            f.write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
