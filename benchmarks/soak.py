#!/usr/bin/env python
"""Soak test: step VectorPortals for a long time and check that nothing grows.

Leaks in a runtime like this one are slow: a few bytes of infos kept per step, a descriptor per
restart, a mapping per reset. They only show over millions of steps, so this script steps each
scenario until a time or step budget is spent and samples, every ``--interval`` seconds, the
agent's and the env servers' resident memory, their open file descriptors and the entries in
/dev/shm. A resource is "flat" when the median of the last quarter of the samples is within a
tolerance of the median of the second quarter (the first quarter is warm-up: allocator pools,
lazily imported modules, ALE's first frames).

    nice -n 10 python benchmarks/soak.py --minutes 30 --max-steps 10000000 \
        --json benchmarks/results/soak_2core.json --plot benchmarks/results/soak_2core.png

Scenarios run one after the other: ``null:210x160x3`` at N=16 (reaches the step budget first)
and ``ALE/Pong-v5`` at N=8 (reaches the time budget first); ``ID=N/B`` steps N envs in async
batches of B (``CartPole-v1=32/16``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from typing import Optional

import numpy as np

import portal_shm

DEFAULT_SCENARIOS = ("null:210x160x3=16", "ALE/Pong-v5=8")
PAGE = os.sysconf("SC_PAGE_SIZE")


def _rss_bytes(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/statm") as handle:
            return int(handle.read().split()[1]) * PAGE
    except OSError:
        return 0


def _open_fds(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return 0


def _server_pids(envs: portal_shm.VectorPortal) -> list:
    pids = []
    for server in envs.servers:
        words = server["runtime"].replace(",", " ").split()
        if words[:2] == ["process", "pid"]:
            pids.append(int(words[2]))
    return pids


def _shm_entries(tag: str) -> tuple:
    """All /dev/shm entries (other programs share the machine), and those of this portal."""
    names = os.listdir("/dev/shm")
    return len(names), sum(tag in name for name in names)


def _make(scenario: str) -> tuple:
    """``ID=N`` steps N envs in lockstep, ``ID=N/B`` in async batches of B (``send``/``recv``)."""
    env_id, _, sizes = scenario.partition("=")
    num, _, batch = sizes.partition("/")
    num_envs = int(num or 8)
    kwargs = {"vector_kwargs": {"batch_size": int(batch)}} if batch else {}
    if env_id.startswith("null:"):
        shape = tuple(int(x) for x in env_id[len("null:") :].split("x"))
        envs = portal_shm.make_vec("portal_shm.server.example_envs:NullEnv", num_envs, shape=shape, **kwargs)
    else:
        envs = portal_shm.make_vec(env_id, num_envs, **kwargs)
    return env_id, num_envs, envs


def soak(scenario: str, minutes: float, max_steps: int, interval: float) -> dict:
    """Step one scenario until ``minutes`` or ``max_steps`` env steps; return its samples."""
    env_id, num_envs, envs = _make(scenario)
    agent = os.getpid()
    servers = _server_pids(envs)
    tag = envs.tag
    samples = []
    rng = np.random.default_rng(0)
    actions = [envs.action_space.sample() for _ in range(64)]
    envs.action_space.seed(0)
    started = time.monotonic()
    next_sample = started
    steps = 0
    batches = 0
    batched = envs.batch_size < envs.num_envs
    try:
        _, infos = envs.reset(seed=0)
        ids = infos.get("env_id")
        while True:
            now = time.monotonic()
            if now >= next_sample:
                total_shm, portal_shm_entries = _shm_entries(tag)
                samples.append(
                    {
                        "t": round(now - started, 3),
                        "steps": steps,
                        "agent_rss": _rss_bytes(agent),
                        "servers_rss": sum(_rss_bytes(pid) for pid in servers),
                        "agent_fds": _open_fds(agent),
                        "servers_fds": sum(_open_fds(pid) for pid in servers),
                        "shm_entries": total_shm,
                        "portal_shm_entries": portal_shm_entries,
                    }
                )
                next_sample = now + interval
                if now - started >= minutes * 60 or steps >= max_steps:
                    break
            for _ in range(50):
                if batched:
                    envs.send(actions[int(rng.integers(64))], ids)
                    ids = envs.recv()[4]["env_id"]
                else:
                    envs.step(actions[int(rng.integers(64))])
            batches += 50
            steps += 50 * (envs.batch_size if batched else num_envs)
    finally:
        elapsed = time.monotonic() - started
        envs.close()
    return {
        "scenario": env_id,
        "num_envs": num_envs,
        "servers": len(servers),
        "seconds": round(elapsed, 1),
        "steps": steps,
        "steps_per_second": round(steps / elapsed, 1),
        "samples": samples,
        "verdict": verdict(samples),
    }


SERIES = ("agent_rss", "servers_rss", "agent_fds", "servers_fds", "shm_entries", "portal_shm_entries")
# Memory may wobble by allocator noise; descriptors and /dev/shm entries must not move at all
# (other programs on a shared machine may add /dev/shm entries: shm_entries is informational).
TOLERANCE = {"agent_rss": 0.05, "servers_rss": 0.05, "agent_fds": 0.0, "servers_fds": 0.0, "portal_shm_entries": 0.0}


def verdict(samples: list, series: tuple = SERIES, floors: tuple = ()) -> dict:
    """Per series: medians of the second and last quarters, growth between them, flat or not.

    ``floors``: series judged by the least value of each quarter instead. Under injected faults
    descriptors come and go with every recovery in flight, so a quarter's median moves with
    when the samples fall; a leak raises the floor, which churn does not."""
    out = {}
    n = len(samples)
    if n < 8:
        return {"note": f"only {n} samples: too few to judge"}
    for key in series:
        values = [s[key] for s in samples]
        pick = min if key in floors else statistics.median
        early = pick(values[n // 4 : n // 2])
        late = pick(values[3 * n // 4 :])
        growth = (late - early) / early if early else float(late != early)
        entry = {
            "early_median": early,
            "late_median": late,
            "growth": round(growth, 4),
            "min": min(values),
            "max": max(values),
            "by": "floor" if key in floors else "median",
        }
        if key in TOLERANCE:  # a floor that sinks is no leak: only its growth counts
            entry["flat"] = (growth if key in floors else abs(growth)) <= TOLERANCE[key]
        out[key] = entry
    return out


def plot(results: list, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [
        ("agent_rss", "servers_rss", "resident memory (MiB)", 2**20),
        ("agent_fds", "servers_fds", "open file descriptors", 1),
        ("portal_shm_entries", "shm_entries", "/dev/shm entries", 1),
    ]
    fig, axes = plt.subplots(len(rows), len(results), figsize=(6 * len(results), 8), squeeze=False)
    for col, result in enumerate(results):
        t = [s["t"] / 60 for s in result["samples"]]
        for row, (a, b, label, scale) in enumerate(rows):
            ax = axes[row][col]
            ax.plot(t, [s[a] / scale for s in result["samples"]], label=a)
            ax.plot(t, [s[b] / scale for s in result["samples"]], label=b)
            ax.set_ylabel(label)
            ax.set_ylim(bottom=0)
            ax.legend(fontsize=7)
            if row == 0:
                ax.set_title(
                    f"{result['scenario']} N={result['num_envs']}: {result['steps']:,} steps "
                    f"in {result['seconds'] / 60:.1f} min",
                    fontsize=9,
                )
            if row == len(rows) - 1:
                ax.set_xlabel("minutes")
    fig.tight_layout()
    fig.savefig(path, dpi=90)


def main(argv: Optional[list] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--scenarios",
        default=",".join(DEFAULT_SCENARIOS),
        help="comma-separated ID=N or ID=N/B (batches of B); ID is an env id or null:AxBxC",
    )
    parser.add_argument("--minutes", type=float, default=30.0, help="time budget per scenario")
    parser.add_argument("--max-steps", type=int, default=10_000_000, help="env-step budget per scenario")
    parser.add_argument("--interval", type=float, default=10.0, help="seconds between samples")
    parser.add_argument("--json", help="write the samples and verdicts here")
    parser.add_argument("--plot", help="write a PNG of the samples here (needs matplotlib)")
    args = parser.parse_args(argv)
    results = []
    for scenario in args.scenarios.split(","):
        result = soak(scenario.strip(), args.minutes, args.max_steps, args.interval)
        results.append(result)
        flat = {k: v.get("flat") for k, v in result["verdict"].items() if isinstance(v, dict) and "flat" in v}
        print(
            f"{result['scenario']} N={result['num_envs']}: {result['steps']:,} steps in {result['seconds']:.0f} s "
            f"({result['steps_per_second']:,.0f}/s); flat: {flat}",
            flush=True,
        )
        report = {
            "machine": {"python": platform.python_version(), "cpus": os.cpu_count(), "platform": platform.platform()},
            "settings": vars(args),
            "results": results,
        }
        if args.json:
            with open(args.json, "w") as handle:
                json.dump(report, handle, indent=1)
        if args.plot:
            plot(results, args.plot)
    ok = all(v.get("flat", True) for r in results for v in r["verdict"].values() if isinstance(v, dict))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
