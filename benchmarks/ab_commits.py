"""Two commits of portal-shm side by side: ``portal-shm bench`` rounds of each, interleaved.

"Performance unchanged within noise" is a claim about two commits on one machine in one run: this
checks out ``BASE`` (and ``HEAD``, default the working tree) as git worktrees, runs the same bench
command under each in turn (``--repeat 1`` per round, ``ROUNDS`` rounds, A B B A ...), and prints
per cell the median steps/s of each side and the median of the per-round ratios HEAD/BASE, with the
rounds' range. The figures move 10-30 % between runs on small VMs: read the ratios, not the rates.

    python benchmarks/ab_commits.py 4c9c78a --rounds 4 -- null:4 CartPole-v1 -n 1,8 --against sync

Everything after ``--`` goes to ``portal-shm bench`` (``--seconds 2 --warmup 20 --no-references
--alloc-steps 0`` are added unless given). Each side's env servers run that side's code: the
checkout comes first on ``PYTHONPATH``, and the process backend hands it on to its servers.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

from ab_checkouts import checkouts, turns

DEFAULTS = {"--seconds": "2", "--warmup": "20", "--alloc-steps": "0"}


def bench(root: str, args: list, out: str) -> dict:
    command = [sys.executable, "-m", "portal_shm", "bench", *args, "--repeat", "1", "-q", "--json", out]
    env = {**os.environ, "PYTHONPATH": root}
    subprocess.run(command, cwd=root, env=env, check=True, stdout=subprocess.DEVNULL)
    with open(out) as handle:
        return json.load(handle)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("base", help="the commit to compare against")
    parser.add_argument("--head", default=None, help="the other commit (default: this working tree)")
    parser.add_argument("--rounds", type=int, default=4)
    argv = sys.argv[1:]
    split = argv.index("--") if "--" in argv else len(argv)
    options = parser.parse_args(argv[:split])
    args = argv[split + 1 :]  # portal-shm bench's own
    for flag, value in DEFAULTS.items():
        if flag not in args:
            args += [flag, value]
    if "--no-references" not in args:
        args.append("--no-references")
    rates: dict = {}
    with checkouts(options.base, options.head, "portal-shm-ab-") as (roots, tmp):
        for r, side in turns(options.rounds):
            report = bench(roots[side], args, os.path.join(tmp, f"{side}-{r}.json"))
            for sample in report["samples"]:
                key = (sample["scenario"], sample["num_envs"], sample["system"])
                rates.setdefault(key, {}).setdefault(side, []).append(sample["steps_per_s"])
    print(f"{'scenario':<18} {'N':>3} {'system':<18} {'base/s':>10} {'head/s':>10} {'head/base':>9}  rounds")
    for (scenario, n, system), sides in sorted(rates.items()):
        base, head = sides.get("base", []), sides.get("head", [])
        ratios = [h / b for h, b in zip(head, base) if b]
        if not ratios:
            continue
        print(
            f"{scenario:<18} {n:>3} {system:<18} {statistics.median(base):>10,.0f} {statistics.median(head):>10,.0f} "
            f"{statistics.median(ratios):>9.3f}  {min(ratios):.2f}-{max(ratios):.2f}"
        )


if __name__ == "__main__":
    main()
