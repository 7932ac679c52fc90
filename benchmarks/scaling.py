"""The scaling curve: throughput, memory, start-up and close time of N = 1 ... 256 envs.

    python benchmarks/scaling.py --scenarios CartPole-v1 ALE/Pong-v5 training:ALE/Pong-v5 \\
        --num-envs 1,4,16,64,256 --systems portal,portal-1,async,envpool,ale-vector \\
        --modes lockstep,batches --seconds 3 --json scaling.json --plot scaling.png

Every cell (system, scenario, N, mode) runs in a Python process of its own (``--cell``), so the
memory it reports is its own: the PSS (proportional set size: a page shared by k processes
counts 1/k in each) of that process and of every process under it (env servers, zygotes,
AsyncVectorEnv's workers), read from ``/proc/PID/smaps_rollup`` after the timed run. ``start_s`` is
make plus reset, ``close_s`` the close, and a cell whose processes or ``/dev/shm`` entries outlive
its close says so (``left``).

Systems: ``portal`` (``make_vec``'s defaults: a server per core, zygote-forked), ``portal-1`` (one
env per server, the SB3 drop-in's layout: crash isolation per env), ``portal-1-fresh`` (the same,
every server a fresh interpreter: ``server_start="fresh"``), ``async`` (gymnasium's AsyncVectorEnv,
lockstep only), and ``envpool``, ``ale-vector`` (ale_py's ``AtariVectorEnv``) where they run the
scenario (``portal-shm bench``'s builders: the same settings as its tables). Mode ``batches``:
envpool-style ``recv``/``send`` of half the envs (N >= 2) for the systems that have it.
Scenarios are ``portal-shm bench``'s (``training:ALE/Pong-v5``: 84x84 grey, frameskip 4, stack 4).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from typing import Any, Optional

import numpy as np

SYSTEMS = ("portal", "portal-1", "portal-1-fresh", "async", "envpool", "ale-vector")
#: One color per system in every panel (lockstep solid, batches dashed).
COLORS = dict(zip(SYSTEMS, ("#d62728", "#ff7f0e", "#e377c2", "#1f77b4", "#2ca02c", "#9467bd")))
MIB = 1 << 20


# -- one cell, in its own process ----------------------------------------------------------------


def pss_bytes(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/smaps_rollup") as handle:
            for line in handle:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def shm_entries() -> set:
    try:
        return set(os.listdir("/dev/shm"))
    except OSError:
        return set()


def build(system: str, sc: Any, n: int, batch: Optional[int], options: Any) -> Any:
    if system.startswith("portal"):
        import portal_shm

        vector: dict = {} if batch is None else {"batch_size": batch}
        if system != "portal":
            vector["envs_per_server"] = 1
        elif sc.is_training:  # as portal_shm.envpool lays it out: a server per batch, ALE's threads inside
            vector["envs_per_server"] = batch or n
        if system.endswith("-fresh"):
            vector["server_start"] = "fresh"
        return portal_shm.make_vec(sc.target, n, vector_kwargs=vector, env_kwargs=sc.kwargs)
    from portal_shm.bench.systems import SYSTEMS as BENCH

    reason = BENCH[system].skip_reason(sc, options)
    if reason is not None:
        raise LookupError(reason)
    return BENCH[system].build(sc, n, options)


def cell(system: str, scenario: str, n: int, mode: str, seconds: float, seed: int) -> dict:
    from portal_shm.bench import measure
    from portal_shm.bench.ceiling import sample_actions
    from portal_shm.bench.cpu import descendants
    from portal_shm.bench.options import BenchOptions
    from portal_shm.bench.scenarios import parse_scenario
    from portal_shm.bench.systems import close_quietly, supports_batches

    sc = parse_scenario(scenario)
    batch = max(1, n // 2) if mode == "batches" else None
    options = BenchOptions([sc], num_envs=[n], batch_size=batch, seed=seed, against=[])
    out: dict = {"system": system, "scenario": scenario, "num_envs": n, "mode": mode}
    if system.startswith("portal"):
        import portal_shm.api  # noqa: F401  (what make_vec imports: timed no more than gymnasium's own imports)
    shm_before, me = shm_entries(), os.getpid()
    out["base_mib"] = pss_bytes(me) / MIB  # this process before the system: Python, numpy, gymnasium
    begin = time.perf_counter()
    try:
        envs = build(system, sc, n, batch, options)
    except LookupError as exc:
        return {**out, "skipped": str(exc)}
    failed = True
    try:
        if batch is not None and not supports_batches(envs):
            return {**out, "skipped": f"{system} has no async batches"}
        envs.reset(seed=seed)
        out["start_s"] = time.perf_counter() - begin
        actions = sample_actions(envs.action_space, seed)
        lat = np.zeros(1 << 20, np.int64)
        if batch is None:
            result = measure.timed_run(envs, actions, seconds, 10, lat)
        else:
            result = measure.batched_run(envs, actions, seconds, 10, lat, True)
            envs.recv()  # (the last batch sent: none in flight at close)
        out["steps_per_s"] = result["steps_per_s"]
        workers = sorted(descendants([me]))
        out["agent_mib"] = pss_bytes(me) / MIB
        out["workers_mib"] = sum(pss_bytes(pid) for pid in workers) / MIB
        out["processes"] = len(workers)
        failed = False
    finally:
        begin = time.perf_counter()
        problem = close_quietly(envs, failed)
        out["close_s"] = time.perf_counter() - begin
        if problem:
            out["error"] = problem
    out["loadavg_1m"] = os.getloadavg()[0]  # (other work on the machine shows here)
    time.sleep(0.5)  # (a process that exits as close returns is not a leftover)
    left = [f"pid {pid}" for pid in descendants([me])] + [f"/dev/shm/{name}" for name in shm_entries() - shm_before]
    out["left"] = left
    return out


# -- the sweep -------------------------------------------------------------------------------------


def run_cell(args: argparse.Namespace, system: str, scenario: str, n: int, mode: str) -> dict:
    command = [sys.executable, __file__, "--cell", system, scenario, str(n), mode, str(args.seconds), str(args.seed)]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=args.cell_timeout)
    except subprocess.TimeoutExpired:
        return {"system": system, "scenario": scenario, "num_envs": n, "mode": mode, "error": "timed out"}
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        return {"system": system, "scenario": scenario, "num_envs": n, "mode": mode, "error": " | ".join(tail)[:500]}
    return json.loads(lines[-1])


def wanted(args: argparse.Namespace, system: str, scenario: str, n: int, mode: str) -> bool:
    limit = args.limit.get(system) or args.limit.get(scenario)
    if limit is not None and n not in limit:
        return False
    if mode == "batches" and (n < 2 or system == "async"):
        return False
    return not (system == "ale-vector" and not scenario.startswith(("ALE/", "training:ALE/")))


def line(result: dict) -> str:
    head = f"{result['scenario']:22s} {result['system']:15s} {result['mode']:8s} N={result['num_envs']:<4d}"
    if "skipped" in result:
        return f"{head} skipped: {result['skipped'][:90]}"
    if "steps_per_s" not in result:
        return f"{head} error: {result.get('error', '?')[:90]}"
    total = result["agent_mib"] + result["workers_mib"] - result["base_mib"]
    return (
        f"{head} {result['steps_per_s']:>10,.0f} steps/s  start {result['start_s']:6.2f} s  close "
        f"{result['close_s']:5.2f} s  workers {result['workers_mib']:7.1f} MiB  per env "
        f"{total / result['num_envs']:6.1f} MiB" + (f"  LEFT {result['left']}" if result.get("left") else "")
    )


def plot(results: list, path: str, where: str = "") -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    scenarios = sorted({r["scenario"] for r in results if "steps_per_s" in r})
    panels = [
        ("steps_per_s", "env-steps/s", True),
        ("per_env_mib", "MiB per env (PSS, agent + workers)", True),
        ("start_s", "start: make + reset (s)", True),
        ("close_s", "close (s)", True),
    ]
    fig, axes = plt.subplots(len(scenarios), 4, figsize=(18, 4.2 * len(scenarios)), squeeze=False)
    for row, scenario in enumerate(scenarios):
        cells = [r for r in results if r["scenario"] == scenario and "steps_per_s" in r]
        series = sorted({(r["system"], r["mode"]) for r in cells})
        for col, (key, label, log) in enumerate(panels):
            ax = axes[row][col]
            for system, mode in series:
                points = sorted(
                    (r["num_envs"], value(r, key)) for r in cells if (r["system"], r["mode"]) == (system, mode)
                )
                style = "-" if mode == "lockstep" else "--"
                color = COLORS.get(system)
                ax.plot(
                    [p[0] for p in points],
                    [p[1] for p in points],
                    style,
                    marker="o",
                    color=color,
                    label=f"{system} {mode}",
                )
            ax.set_xscale("log", base=2)
            if log:
                ax.set_yscale("log")
            ax.set_xlabel("N envs")
            ax.set_title(f"{scenario}: {label}", fontsize=10)
            ax.grid(True, alpha=0.3)
        axes[row][3].legend(fontsize=9, loc="center left", bbox_to_anchor=(1.02, 0.5))
    if where:
        fig.suptitle(f"benchmarks/scaling.py: {where}", fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=90)


def value(result: dict, key: str) -> float:
    if key == "per_env_mib":
        return (result["agent_mib"] + result["workers_mib"] - result["base_mib"]) / result["num_envs"]
    return float(result[key])


def machine() -> dict:
    model = next(
        (line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")), "?"
    )
    return {"cpu_model": model, "cpu_count": os.cpu_count(), "python": platform.python_version()}


def main(argv: Optional[list] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cell", nargs=6, metavar=("SYSTEM", "SCENARIO", "N", "MODE", "SECONDS", "SEED"))
    parser.add_argument("--scenarios", nargs="+", default=["CartPole-v1", "ALE/Pong-v5", "training:ALE/Pong-v5"])
    parser.add_argument("--num-envs", default="1,4,16,64,256", help="comma list of N")
    parser.add_argument("--systems", default="portal,portal-1,async,envpool,ale-vector", help=f"of {','.join(SYSTEMS)}")
    parser.add_argument("--modes", default="lockstep,batches", help="of lockstep,batches")
    parser.add_argument("--seconds", type=float, default=3.0, help="timed seconds per cell")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cell-timeout", type=float, default=900.0, help="seconds a cell may take in all")
    parser.add_argument(
        "--limit", action="append", default=[], metavar="NAME=N,N", help="run system or scenario NAME at these N only"
    )
    parser.add_argument("--json", help="write every cell's result and the command")
    parser.add_argument("--plot", help="write the curves (PNG)")
    args = parser.parse_args(argv)
    if args.cell:
        system, scenario, n, mode, seconds, seed = args.cell
        print(json.dumps(cell(system, scenario, int(n), mode, float(seconds), int(seed))), flush=True)
        return 0
    systems = args.systems.split(",")
    unknown = sorted(set(systems) - set(SYSTEMS))
    if unknown:
        parser.error(f"--systems: unknown {', '.join(unknown)}; take from {', '.join(SYSTEMS)}")
    try:
        args.limit = {
            name: [int(x) for x in values.split(",")] for name, values in (item.split("=", 1) for item in args.limit)
        }
        sizes = [int(x) for x in args.num_envs.split(",")]
    except ValueError:
        parser.error("--num-envs and --limit take comma lists of integers, e.g. --limit portal-1-fresh=1,4,16")
    results: list = []
    started = time.time()
    for scenario in args.scenarios:
        for n in sizes:
            for mode in args.modes.split(","):
                for system in systems:
                    if wanted(args, system, scenario, n, mode):
                        results.append(run_cell(args, system, scenario, n, mode))
                        print(line(results[-1]), flush=True)
    report = {
        "tool": "benchmarks/scaling.py",
        "command": ["python", "benchmarks/scaling.py", *(argv if argv is not None else sys.argv[1:])],
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
        "duration_s": time.time() - started,
        "machine": machine(),
        "results": results,
    }
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(report, handle, indent=1)
    if args.plot:
        plot(results, args.plot, f"{report['machine']['cpu_model']}, {report['created'][:10]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
