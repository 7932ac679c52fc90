#!/usr/bin/env python
"""Throughput of recycling: Pong N=8 with every server recycled every episode (warm spares) against
the same portal without recycling, side by side; ``--fresh`` adds recycling whose spares start as
fresh runtimes (``spare='start'``) instead of being forked from a zygote (the default).

    python benchmarks/recycle_throughput.py --rounds 5 --seconds 20 --fresh --json benchmarks/results/recycle_2core.json

Rounds interleave the two systems (recycling first in odd rounds), each a fresh portal stepped
with random actions for ``--seconds`` after a warm-up; the ratio quoted is the median of the
per-round ratios (recycling / none), as figures on this machine move 10-30 % between runs. The
recycled portal's episodes are counted to show how many swaps the rounds held.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from typing import Any, Optional

import gymnasium as gym
import numpy as np

import portal_shm


def _round(env_id: str, num_envs: int, seconds: float, warmup: float, vector: dict[str, Any]) -> dict[str, Any]:
    envs = portal_shm.make_vec(env_id, num_envs, vector_kwargs=vector)
    try:
        envs.reset(seed=0)
        rng = np.random.default_rng(0)
        n = envs.single_action_space.n  # type: ignore[attr-defined]
        start = time.perf_counter()
        while time.perf_counter() - start < warmup:
            envs.step(rng.integers(0, n, num_envs))
        recycles_before = sum(getattr(envs, "recycles", [0]))
        steps, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            envs.step(rng.integers(0, n, num_envs))
            steps += 1
        elapsed = time.perf_counter() - start
        return {
            "steps_per_s": steps * num_envs / elapsed,
            "recycles": sum(getattr(envs, "recycles", [0])) - recycles_before,
            "seconds": elapsed,
        }
    finally:
        envs.close()


def main(argv: Optional[list[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", default="ALE/Pong-v5")
    parser.add_argument("--num-envs", type=int, default=8)
    parser.add_argument("--envs-per-server", type=int, default=1)
    parser.add_argument("--episodes", type=int, default=1, help="recycle each server after this many episodes")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--max-per-step", type=int, default=0, help="the recycle policy's max_per_step (default: its own)"
    )
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--warmup", type=float, default=3.0)
    parser.add_argument("--json", help="write the samples and the summary here")
    parser.add_argument(
        "--fresh", action="store_true", help="also recycle with spares started as fresh runtimes (spare='start')"
    )
    args = parser.parse_args(argv)
    if args.env.startswith("ALE/"):
        import ale_py

        gym.register_envs(ale_py)
    base = {"envs_per_server": args.envs_per_server}
    policy = {
        "episodes": args.episodes,
        "jitter": 0.1,
        **({"max_per_step": args.max_per_step} if args.max_per_step else {}),
    }
    systems = {"none": base, "recycle": {**base, "recycle": policy}}
    if args.fresh:
        systems["recycle-fresh"] = {**base, "recycle": {**policy, "spare": "start"}}
    samples: list[dict[str, Any]] = []
    for index in range(args.rounds):
        order = list(systems) if index % 2 else list(reversed(systems))
        for name in order:
            sample = {
                "round": index,
                "system": name,
                **_round(args.env, args.num_envs, args.seconds, args.warmup, systems[name]),
            }
            samples.append(sample)
            print(f"round {index} {name:8s} {sample['steps_per_s']:8.0f} env-steps/s  recycles {sample['recycles']}")
    summary: dict[str, Any] = {
        "none_steps_per_s": statistics.median(s["steps_per_s"] for s in samples if s["system"] == "none")
    }
    for name in [n for n in systems if n != "none"]:
        ratios = []
        for index in range(args.rounds):
            by = {s["system"]: s for s in samples if s["round"] == index}
            ratios.append(by[name]["steps_per_s"] / by["none"]["steps_per_s"])
        mine = [s for s in samples if s["system"] == name]
        prefix = "" if name == "recycle" else name.replace("-", "_") + "_"
        summary.update(
            {
                f"{prefix}ratio_median": statistics.median(ratios),
                f"{prefix}ratio_min": min(ratios),
                f"{prefix}ratio_max": max(ratios),
                f"{prefix}recycles_per_s": statistics.median(s["recycles"] / s["seconds"] for s in mine),
                f"{prefix}recycle_steps_per_s": statistics.median(s["steps_per_s"] for s in mine),
            }
        )
        spares = "spares forked from a zygote" if name == "recycle" else "spares started fresh"
        print(
            f"recycling every {args.episodes} episode(s), {spares} / none: median "
            f"{summary[prefix + 'ratio_median']:.3f}x (rounds {summary[prefix + 'ratio_min']:.3f}-"
            f"{summary[prefix + 'ratio_max']:.3f}), {summary[prefix + 'recycles_per_s']:.2f} swaps/s; target >= 0.95x"
        )
    if args.json:
        report = {
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "command": ["python", "benchmarks/recycle_throughput.py", *(argv if argv is not None else sys.argv[1:])],
            "cpu_count": os.cpu_count(),
            "options": vars(args),
            "samples": samples,
            "summary": summary,
        }
        with open(args.json, "w") as handle:
            json.dump(report, handle, indent=2)


if __name__ == "__main__":
    main()
