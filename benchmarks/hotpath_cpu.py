#!/usr/bin/env python
"""CPU per step of two commits side by side: the agent's and its env servers' CPU time per batch
step (``/proc/<pid>/schedstat``, in nanoseconds), rounds interleaved A B B A ...

Throughput on a small shared VM moves 10-30 % between rounds even for the same commit (the
gymnasium reference moves as much), so a 1 % cost of the hot path cannot be read from steps/s.
CPU time spent per step does not depend on how the cores were shared out, only on the work
done: what a change adds to the hot path shows here. Spinning is off by default (``--spin-wait``):
a spin's CPU is time spent waiting, which moves with the scheduling as throughput does.

    python benchmarks/hotpath_cpu.py a826256 --rounds 6 --steps 20000 --env null:4 -n 8

``--head`` defaults to this working tree. Each round runs ``portal_shm.make_vec`` in a fresh
interpreter with the side's checkout first on ``PYTHONPATH`` (its servers inherit it).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

from ab_checkouts import checkouts, turns

CHILD = r"""
import json, os, sys, time
import numpy as np
import portal_shm
env, n, steps, spin = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
kwargs = {}
if env.startswith("null:"):
    env, kwargs = "portal_shm.server.example_envs:NullEnv", {"shape": (int(env[5:]),)}
elif env.startswith("ALE/"):
    import gymnasium as gym, ale_py
    gym.register_envs(ale_py)
envs = portal_shm.make_vec(env, n, vector_kwargs={"spin_wait": spin}, **kwargs)
def cpu(pid):
    with open(f"/proc/{pid}/schedstat") as f:  # nanoseconds on a CPU (stat's ticks are 10 ms)
        return int(f.read().split()[0]) / 1e9
try:
    envs.reset(seed=0)
    space = envs.single_action_space
    actions = np.zeros((n,) + space.shape, space.dtype) if space.shape else np.zeros(n, np.int64)
    for _ in range(max(200, steps // 20)):
        envs.step(actions)
    pids = [s["pid"] for s in envs.servers]
    agent0, servers0, wall0 = time.process_time(), sum(map(cpu, pids)), time.perf_counter()
    for _ in range(steps):
        envs.step(actions)
    agent, servers, wall = time.process_time() - agent0, sum(map(cpu, pids)) - servers0, time.perf_counter() - wall0
finally:
    envs.close()
print(json.dumps({"agent_us": agent / steps * 1e6, "servers_us": servers / steps * 1e6, "steps_per_s": steps * n / wall}))
"""


def one(root: str, env: str, n: int, steps: int, spin: float) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", CHILD, env, str(n), str(steps), str(spin)],
        cwd=root,
        env={**os.environ, "PYTHONPATH": root},
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("base", help="the commit to compare against")
    parser.add_argument("--head", default=None, help="the other commit (default: this working tree)")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--steps", type=int, default=20000, help="batch steps measured per round")
    parser.add_argument("--env", default="null:4", help="an env id, or null:K for NullEnv of shape (K,)")
    parser.add_argument("-n", "--num-envs", type=int, default=8)
    parser.add_argument(
        "--spin-wait",
        type=float,
        default=0.0,
        help="the portals' spin_wait (default 0: a spin burns CPU while it waits)",
    )
    parser.add_argument("--json", help="write the samples and the summary here")
    options = parser.parse_args()
    samples: list = []
    with checkouts(options.base, options.head, "portal-shm-cpu-") as (roots, _):
        for r, side in turns(options.rounds):
            sample = {
                "round": r,
                "side": side,
                **one(roots[side], options.env, options.num_envs, options.steps, options.spin_wait),
            }
            samples.append(sample)
            print(
                f"round {r} {side}: agent {sample['agent_us']:7.1f} us/step, servers "
                f"{sample['servers_us']:7.1f} us/step, {sample['steps_per_s']:9,.0f} env-steps/s",
                flush=True,
            )
    summary = {}
    for key in ("agent_us", "servers_us", "steps_per_s"):
        ratios = [
            next(s[key] for s in samples if s["round"] == r and s["side"] == "head")
            / next(s[key] for s in samples if s["round"] == r and s["side"] == "base")
            for r in range(options.rounds)
        ]
        summary[key] = {
            "base": statistics.median(s[key] for s in samples if s["side"] == "base"),
            "head": statistics.median(s[key] for s in samples if s["side"] == "head"),
            "ratio_median": statistics.median(ratios),
            "ratio_min": min(ratios),
            "ratio_max": max(ratios),
        }
        print(
            f"{key:12s} base {summary[key]['base']:10.1f} head {summary[key]['head']:10.1f} head/base "
            f"{summary[key]['ratio_median']:.3f} (rounds {summary[key]['ratio_min']:.3f}-{summary[key]['ratio_max']:.3f})"
        )
    if options.json:
        with open(options.json, "w") as handle:
            json.dump(
                {"command": sys.argv, "options": vars(options), "samples": samples, "summary": summary},
                handle,
                indent=2,
            )


if __name__ == "__main__":
    main()
