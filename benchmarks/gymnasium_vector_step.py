"""gymnasium's own ``benchmark_vector_step`` on a portal, beside ``portal-shm bench`` in one run.

Both count env steps per second of random actions in lockstep; gymnasium's loop also samples
the actions (``action_space.sample()``) inside the timed loop, so it reads a little lower. Rounds
alternate (gymnasium, bench, gymnasium, ...) so drift hits both alike.

    python benchmarks/gymnasium_vector_step.py CartPole-v1 -n 8 --rounds 3 --seconds 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

from gymnasium.utils.performance import benchmark_vector_step

import portal_shm


def gymnasium_rate(env_id: str, num_envs: int, seconds: int) -> float:
    envs = portal_shm.make_vec(env_id, num_envs)
    try:
        return benchmark_vector_step(envs, target_duration=seconds, seed=0)
    finally:
        envs.close()


def bench_rate(env_id: str, num_envs: int, seconds: int) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "bench.json")
        command = [sys.executable, "-m", "portal_shm", "bench", env_id, "-n", str(num_envs), "--against", "none",
                   "--seconds", str(seconds), "--repeat", "1", "--alloc-steps", "0", "--no-references", "-q",
                   "--json", out]  # fmt: skip
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
        with open(out) as handle:
            samples = json.load(handle)["samples"]
    return next(s["steps_per_s"] for s in samples if s["system"] == "portal-process")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("env_id")
    parser.add_argument("-n", "--num-envs", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=int, default=3)
    args = parser.parse_args()
    gym_rates, bench_rates = [], []
    for _ in range(args.rounds):
        gym_rates.append(gymnasium_rate(args.env_id, args.num_envs, args.seconds))
        bench_rates.append(bench_rate(args.env_id, args.num_envs, args.seconds))
    ratios = [g / b for g, b in zip(gym_rates, bench_rates)]
    print(f"{args.env_id} N={args.num_envs}, {args.rounds} rounds of {args.seconds} s each, alternating")
    print(f"  gymnasium benchmark_vector_step: {statistics.median(gym_rates):>10,.0f} env steps/s")
    print(f"  portal-shm bench (lockstep):     {statistics.median(bench_rates):>10,.0f} env steps/s")
    print(f"  gymnasium / bench: median {statistics.median(ratios):.3f} (rounds {min(ratios):.3f}-{max(ratios):.3f})")


if __name__ == "__main__":
    main()
