#!/usr/bin/env python
"""An env server's own work per step in two commits side by side: what a change to the server's hot
path (``server/loop.py``: reading actions, stepping, writing results and observations into the
ring) costs, without the agent, the doorbells or the scheduling of several processes.

Each side runs one long-lived process holding ``-n`` envs under a real ``EnvServer`` over a ring of
its own (``hotpath_budget.py``'s ``served`` loop, its ``step`` called in a loop); the two take turns,
A B B A ..., for ``--rounds`` short windows, one running while the other waits, so both see the
same load. Per window: CPU microseconds per env step (the process's CPU time, not moved by how the
cores were shared) and env-steps/s. Printed per env: each side's median and the median of the
per-round ratios head/base, with their range.

    python benchmarks/served_ab.py HEAD~1 --head HEAD --env ALE/Pong-v5 --env CartPole-v1 -n 8 --rounds 30

``--head`` defaults to this working tree. Each side's process has its checkout first on ``PYTHONPATH``.
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
sys.path.insert(0, os.path.join(os.getcwd(), "benchmarks"))
from hotpath_budget import _served_loop
from portal_shm.bench.ceiling import sample_actions
from portal_shm.bench.scenarios import parse_scenario
name, count, seed, seconds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
envs = [parse_scenario(name).env_fn()() for _ in range(count)]
for j, env in enumerate(envs):
    env.reset(seed=seed + j)
run, close = _served_loop(envs, sample_actions(envs[0].action_space, seed))
run(0.3)  # warm up
print("ready", flush=True)
for line in sys.stdin:
    if line.strip() != "run":
        break
    cpu0, wall0 = time.process_time(), time.perf_counter()
    steps = run(seconds)
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    print(json.dumps({"cpu_us": cpu / steps * 1e6, "steps_per_s": steps / wall}), flush=True)
close()
"""


class Side:
    """One checkout's served process, run one window at a time."""

    def __init__(self, root: str, env: str, count: int, seed: int, seconds: float) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-c", CHILD, env, str(count), str(seed), str(seconds)],
            cwd=root,
            env={**os.environ, "PYTHONPATH": root},
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self._expect("ready")

    def _expect(self, what: str) -> str:
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"the served process exited (rc {self.process.wait()}) before saying {what!r}")
        return line

    def window(self) -> dict:
        self.process.stdin.write("run\n")
        self.process.stdin.flush()
        return json.loads(self._expect("its window's figures"))

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait(timeout=60)


def compare(roots: dict, env: str, count: int, seed: int, rounds: int, seconds: float) -> dict:
    sides = {side: Side(roots[side], env, count, seed, seconds) for side in ("base", "head")}
    samples: dict = {"base": [], "head": []}
    try:
        for _, side in turns(rounds):
            samples[side].append(sides[side].window())
    finally:
        for side in sides.values():
            side.close()
    summary = {}
    for key in ("cpu_us", "steps_per_s"):
        ratios = [h[key] / b[key] for h, b in zip(samples["head"], samples["base"])]
        summary[key] = {
            "base": statistics.median(s[key] for s in samples["base"]),
            "head": statistics.median(s[key] for s in samples["head"]),
            "ratio_median": statistics.median(ratios),
            "ratio_min": min(ratios),
            "ratio_max": max(ratios),
        }
    return {"env": env, "num_envs": count, "samples": samples, "summary": summary}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("base", help="the commit to compare against")
    parser.add_argument("--head", default=None, help="the other commit (default: this working tree)")
    parser.add_argument(
        "--env", action="append", help="a scenario of portal-shm bench (repeatable; default CartPole-v1)"
    )
    parser.add_argument("-n", "--num-envs", type=int, default=8, help="envs the server hosts")
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--seconds", type=float, default=0.5, help="length of one window")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", help="write the samples and the summaries here")
    options = parser.parse_args()
    results = []
    with checkouts(options.base, options.head, "portal-shm-served-") as (roots, _):
        for env in options.env or ["CartPole-v1"]:
            result = compare(roots, env, options.num_envs, options.seed, options.rounds, options.seconds)
            results.append(result)
            for key, unit in (("cpu_us", "CPU us/env-step"), ("steps_per_s", "env-steps/s")):
                s = result["summary"][key]
                print(
                    f"{env:<16} N={options.num_envs} {unit:<16} base {s['base']:10.2f} head {s['head']:10.2f} "
                    f"head/base {s['ratio_median']:.3f} (rounds {s['ratio_min']:.3f}-{s['ratio_max']:.3f})",
                    flush=True,
                )
    if options.json:
        with open(options.json, "w") as handle:
            json.dump({"command": sys.argv, "options": vars(options), "results": results}, handle, indent=2)


if __name__ == "__main__":
    main()
