#!/usr/bin/env python
"""Side-by-side throughput and latency of portal_shm against gymnasium's vector envs.

Run from the repository root::

    python benchmarks/vector_bench.py --json benchmarks/results/vector_bench_2core.json   # full matrix
    python benchmarks/vector_bench.py --scenarios null:84x84x4 --num-envs 1,8 --seconds 1 --repeat 1

Systems: ``portal`` (portal_shm.make_vec, process backend, zero-copy ring views), ``sync``
(gymnasium SyncVectorEnv) and ``async`` (gymnasium AsyncVectorEnv, shared_memory=True).
Scenarios: ``null:AxBxC`` (portal_shm.example_envs.NullEnv, a preallocated uint8 frame of that
shape: pure transport cost) or any gymnasium id, e.g. ``ALE/Pong-v5``.

Method: each (scenario, N) cell builds every system, resets it once with ``--seed`` and runs the
systems interleaved (portal sync async portal sync async ...) ``--repeat`` times; a run is
``--warmup`` untimed batched steps, then ``--seconds`` of steps with actions precomputed from a
seeded rng, each ``step`` call timed with perf_counter_ns into a preallocated array (p50/p99).
For gymnasium ids two references join the rotation: ``raw``, one env stepped in a plain loop
in this process, and ``ceiling``, ``os.cpu_count()`` such loops in parallel processes, summed.
Portal's agent-side allocations are measured apart, with tracemalloc over ``--alloc-steps`` steps.

Targets checked at N=8 (PASS/FAIL at the end of the table):
  * null scenarios: portal >= 5x async env-steps/s;
  * gymnasium ids: portal >= 0.8x the ceiling;
  * every cell: no observation-sized allocation on portal's agent side in any step.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import platform
import sys
import threading
import time
import tracemalloc
from dataclasses import dataclass
from importlib import metadata
from typing import Any, Callable, Optional

import gymnasium as gym
import numpy as np

import portal_shm
from portal_shm.example_envs import NullEnv

try:  # registers the ALE/... ids, here and in the spawned ceiling workers
    import ale_py
    gym.register_envs(ale_py)
except ImportError:
    pass
try:  # registers the Vizdoom... ids
    import vizdoom.gymnasium_wrapper  # noqa: F401
except ImportError:
    pass

SYSTEMS = ("portal", "docker", "sync", "async")
DEFAULT_SYSTEMS = ("portal", "sync", "async")
DOCKER_IMAGES = (("ALE/", "portal-shm/ale"), ("Vizdoom", "portal-shm/vizdoom"), ("null:", "portal-shm/ale"))
ORDER = SYSTEMS + ("raw", "ceiling")  # raw and ceiling: gymnasium ids only
NULL_ENTRY_POINT = "portal_shm.example_envs:NullEnv"
ACTION_BATCHES = 256
LATENCY_CAPACITY = 1 << 21  # batched steps that one timed run may record


@dataclass(frozen=True)
class Scenario:
    name: str  # "null:210x160x3" or a gymnasium id
    shape: Optional[tuple] = None  # set for null scenarios

    def env_fn(self) -> Callable[[], gym.Env]:
        shape, name = self.shape, self.name
        return (lambda: NullEnv(shape=shape)) if shape is not None else (lambda: gym.make(name))


def parse_scenario(text: str) -> Scenario:
    if not text.startswith("null:"):
        return Scenario(text)
    dims = text[len("null:"):].lower().split("x")
    shape = tuple(int(d) for d in dims) if all(d.isdigit() for d in dims) else ()
    if not shape or min(shape) < 1:
        raise argparse.ArgumentTypeError(f"bad null scenario {text!r}; expected null:AxBxC with positive sizes")
    return Scenario(text, shape)


def docker_image(sc: Scenario) -> str:
    for prefix, image in DOCKER_IMAGES:
        if sc.name.startswith(prefix):
            return image
    raise SystemExit(f"no docker image known for {sc.name}; the docker system covers {[p for p, _ in DOCKER_IMAGES]}")


def make_system(system: str, sc: Scenario, n: int, envs_per_server: Optional[int]) -> gym.vector.VectorEnv:
    if system in ("portal", "docker"):
        vector_kwargs = {} if envs_per_server is None else {"envs_per_server": envs_per_server}
        env_kwargs = {} if sc.shape is None else {"shape": sc.shape}
        backend = {"backend": "docker", "image": docker_image(sc)} if system == "docker" else {}
        return portal_shm.make_vec(sc.name if sc.shape is None else NULL_ENTRY_POINT, n,
                                   vector_kwargs=vector_kwargs, env_kwargs=env_kwargs, **backend)
    if system == "sync":
        return gym.vector.SyncVectorEnv([sc.env_fn() for _ in range(n)])
    return gym.vector.AsyncVectorEnv([sc.env_fn() for _ in range(n)], shared_memory=True)


def close_quietly(envs: Any, failed: bool) -> None:
    try:
        envs.close(**({"terminate": True} if failed and isinstance(envs, gym.vector.AsyncVectorEnv) else {}))
    except BaseException as exc:  # keep closing the others
        print(f"warning: closing {type(envs).__name__} failed: {exc!r}", file=sys.stderr)


def sample_actions(space: gym.Space, seed: int) -> list:
    space.seed(seed)
    return [space.sample() for _ in range(ACTION_BATCHES)]


def timed_run(envs: gym.vector.VectorEnv, actions: list, seconds: float, warmup: int, lat: np.ndarray) -> dict:
    """Warm up, then step for ``seconds``; each step's latency (ns) goes into ``lat``."""
    k = len(actions)
    for i in range(warmup):
        envs.step(actions[i % k])
    n, cap = 0, len(lat)
    start = now = time.perf_counter_ns()
    end = start + int(seconds * 1e9)
    while now < end and n < cap:
        action = actions[n % k]
        before = time.perf_counter_ns()
        envs.step(action)
        now = time.perf_counter_ns()
        lat[n] = now - before
        n += 1
    elapsed = (now - start) / 1e9
    p50, p99 = np.percentile(lat[:n], [50, 99]) / 1e3
    return {"batched_steps": n, "seconds": elapsed, "steps_per_s": n * envs.num_envs / elapsed,
            "p50_us": float(p50), "p99_us": float(p99), "mean_us": float(lat[:n].mean() / 1e3)}


def agent_allocations(envs: gym.vector.VectorEnv, actions: list, steps: int, warmup: int) -> dict:
    """Per step, the peak of traced memory above its level before the step (transient); over the
    window, the count of blocks of at least one observation's bytes still alive at its end. The
    threshold is at least 1 KiB: every step allocates a few hundred bytes of Python objects."""
    space = envs.single_observation_space
    threshold = max(1024, int(np.prod(space.shape)) * space.dtype.itemsize if isinstance(space, gym.spaces.Box)
                    else int(gym.spaces.flatten(space, space.sample()).nbytes))
    for i in range(warmup):
        envs.step(actions[i % len(actions)])
    transient = np.zeros(steps, np.int64)
    big_blocks = lambda: sum(1 for t in tracemalloc.take_snapshot().traces if t.size >= threshold)  # noqa: E731
    tracemalloc.start()
    try:
        before = big_blocks()  # tracemalloc also sees numpy's data buffers
        for i in range(steps):
            tracemalloc.reset_peak()
            level, _ = tracemalloc.get_traced_memory()
            envs.step(actions[i % len(actions)])
            transient[i] = tracemalloc.get_traced_memory()[1] - level
        retained = big_blocks() - before
    finally:
        tracemalloc.stop()
    return {"steps": steps, "obs_bytes": threshold, "steps_with_obs_sized_alloc": int((transient >= threshold).sum()),
            "max_transient_bytes": int(transient.max()), "mean_transient_bytes": float(transient.mean()),
            "retained_obs_sized_blocks": retained}


def raw_loop(env: gym.Env, actions: list, seconds: float, min_steps: int = 0) -> float:
    """One env stepped in a plain loop, resetting on done; returns env-steps/s."""
    k, n = len(actions), 0
    start = now = time.perf_counter()
    while now - start < seconds or n < min_steps:
        _, _, terminated, truncated, _ = env.step(actions[n % k])
        if terminated or truncated:
            env.reset()
        n += 1
        now = time.perf_counter()
    return n / max(now - start, 1e-9)


def single_env(sc: Scenario, seed: int, warmup: int) -> tuple[gym.Env, list]:
    env = sc.env_fn()()
    actions = sample_actions(env.action_space, seed)
    env.reset(seed=seed)
    raw_loop(env, actions, 0.0, warmup)
    return env, actions


def ceiling_worker(name: str, seconds: float, seed: int, warmup: int, go: Any, stop: Any, queue: Any) -> None:
    env, actions = single_env(parse_scenario(name), seed, warmup)
    try:
        while True:
            go.wait(timeout=900)  # a broken barrier (the agent gave up or died) ends the worker
            if stop.is_set():
                return
            queue.put(raw_loop(env, actions, seconds))
    except (KeyboardInterrupt, threading.BrokenBarrierError):  # Ctrl-C reaches the whole process group
        pass
    finally:
        env.close()


class CeilingPool:
    """os.cpu_count() processes with one env each that run raw loops simultaneously on demand."""

    def __init__(self, sc: Scenario, args: argparse.Namespace) -> None:
        ctx = mp.get_context("spawn")
        self.workers, self.seconds = os.cpu_count() or 1, args.seconds
        self.go, self.stop, self.queue = ctx.Barrier(self.workers + 1), ctx.Event(), ctx.Queue()
        self.procs = [ctx.Process(target=ceiling_worker, daemon=True, args=(
            sc.name, args.seconds, args.seed + w, args.warmup, self.go, self.stop, self.queue)) for w in range(self.workers)]
        for p in self.procs:
            p.start()

    def run(self) -> float:
        """Summed env-steps/s of one simultaneous round of raw loops."""
        self.go.wait(timeout=300)  # the first round also waits for the workers to build their envs
        return sum(self.queue.get(timeout=60 + 2 * self.seconds) for _ in range(self.workers))

    def close(self, failed: bool) -> None:
        self.stop.set()
        try:
            self.go.wait(timeout=0.1 if failed else 10)  # releases waiting workers, which see stop
        except threading.BrokenBarrierError:
            pass
        for p in self.procs:
            p.join(timeout=0 if failed else 10)
            if p.is_alive():
                p.terminate()
                p.join()


def run_cell(sc: Scenario, n: int, args: argparse.Namespace, lat: np.ndarray, samples: list) -> Optional[dict]:
    """Build every system for (scenario, N), run them interleaved into ``samples``, close them all
    whatever happens; returns portal's allocation report."""
    built, single, pool, allocs, failed = {}, None, None, None, True
    try:
        for system in sorted(args.systems, key=lambda s: s != "async"):  # fork before portal holds its lock file
            built[system] = make_system(system, sc, n, args.envs_per_server)
            built[system].reset(seed=args.seed)
        actions = {s: sample_actions(e.action_space, args.seed) for s, e in built.items()}
        if sc.shape is None:
            single, pool = single_env(sc, args.seed, args.warmup), CeilingPool(sc, args)
        for r in range(args.repeat):
            for system in list(args.systems) + (["raw", "ceiling"] if pool else []):
                if system in ("raw", "ceiling"):
                    rate = raw_loop(*single, args.seconds) if system == "raw" else pool.run()
                    result = {"steps_per_s": rate, "p50_us": None, "p99_us": None, "procs": 1 if system == "raw" else pool.workers}
                else:
                    result = timed_run(built[system], actions[system], args.seconds, args.warmup, lat)
                samples.append({"scenario": sc.name, "num_envs": n, "system": system, "repeat": r, **result})
                print(f"  {sc.name} N={n} {system:7s} rep {r}: {result['steps_per_s']:12,.0f} env-steps/s",
                      file=sys.stderr, flush=True)
        if "portal" in built and args.alloc_steps > 0:
            allocs = agent_allocations(built["portal"], actions["portal"], args.alloc_steps, args.warmup)
            allocs.update(scenario=sc.name, num_envs=n)
        failed = False
    finally:
        for envs in built.values():
            close_quietly(envs, failed)
        if single is not None:
            close_quietly(single[0], failed)
        if pool is not None:
            pool.close(failed)
    return allocs


def summarize(samples: list, allocs: list) -> list:
    """One row per (scenario, N, system): median [min, max] env-steps/s, latencies and ratios."""
    alloc_of = {(a["scenario"], a["num_envs"]): a for a in allocs}
    groups: dict = {}
    for s in samples:
        groups.setdefault((s["scenario"], s["num_envs"], s["system"]), []).append(s)
    median = {key: float(np.median([s["steps_per_s"] for s in group])) for key, group in groups.items()}
    mid = lambda values: float(np.median(values)) if values else None  # noqa: E731
    rows, order = [], list(dict.fromkeys(s["scenario"] for s in samples))  # scenarios in the order run
    for (name, n, system), group in sorted(groups.items(), key=lambda kv: (order.index(kv[0][0]), kv[0][1], ORDER.index(kv[0][2]))):
        ceiling, async_ = median.get((name, n, "ceiling")), median.get((name, n, "async"))
        alloc = alloc_of.get((name, n)) if system == "portal" else None
        rows.append({
            "scenario": name, "num_envs": n, "system": system, "steps_per_s_median": median[(name, n, system)],
            "steps_per_s_min": min(s["steps_per_s"] for s in group), "steps_per_s_max": max(s["steps_per_s"] for s in group),
            "p50_us_median": mid([s["p50_us"] for s in group if s["p50_us"] is not None]),
            "p99_us_median": mid([s["p99_us"] for s in group if s["p99_us"] is not None]),
            "x_ceiling": median[(name, n, system)] / ceiling if ceiling else None,
            "x_async": median[(name, n, system)] / async_ if async_ else None,
            "alloc": None if alloc is None else f"{alloc['steps_with_obs_sized_alloc']}/{alloc['steps']}",
        })
    return rows


def check_targets(rows: list, allocs: list) -> list:
    targets = []
    for row in (r for r in rows if r["system"] in ("portal", "docker") and r["num_envs"] == 8):
        if row["scenario"].startswith("null:") and row["x_async"] is not None and row["system"] == "portal":
            targets.append({"target": f"{row['scenario']} N=8: portal >= 5x async", "value": row["x_async"],
                            "ok": row["x_async"] >= 5.0})
        if row["x_ceiling"] is not None:
            targets.append({"target": f"{row['scenario']} N=8: {row['system']} >= 0.8x ceiling", "value": row["x_ceiling"],
                            "ok": row["x_ceiling"] >= 0.8})
    by_key = {(r["scenario"], r["num_envs"], r["system"]): r for r in rows}
    for (name, n, system), row in by_key.items():
        process = by_key.get((name, n, "portal"))
        if system == "docker" and n == 8 and process:
            ratio = row["steps_per_s_median"] / process["steps_per_s_median"]
            targets.append({"target": f"{name} N=8: docker within 3% of process", "value": ratio, "ok": ratio >= 0.97})
    for a in allocs:
        bad = a["steps_with_obs_sized_alloc"] + max(a["retained_obs_sized_blocks"], 0)
        targets.append({"target": f"{a['scenario']} N={a['num_envs']}: portal 0 obs-sized allocations per step",
                        "value": bad / a["steps"], "ok": bad == 0})
    return targets


def render(rows: list, targets: list, leftovers: list) -> str:
    fmt = lambda value, spec: "-" if value is None else format(value, spec)  # noqa: E731
    header = (f"{'scenario':<16} {'N':>3} {'system':<7} {'env-steps/s median [min - max]':>34} "
              f"{'p50 us':>9} {'p99 us':>9} {'x ceil':>6} {'x async':>7} {'obs allocs':>10}")
    lines = [header, "-" * len(header)]
    for r in rows:
        spread = f"{r['steps_per_s_median']:,.0f} [{r['steps_per_s_min']:,.0f} - {r['steps_per_s_max']:,.0f}]"
        lines.append(f"{r['scenario']:<16} {r['num_envs']:>3} {r['system']:<7} {spread:>34} "
                     f"{fmt(r['p50_us_median'], '9.1f'):>9} {fmt(r['p99_us_median'], '9.1f'):>9} "
                     f"{fmt(r['x_ceiling'], '6.2f'):>6} {fmt(r['x_async'], '7.2f'):>7} {r['alloc'] or '-':>10}")
    lines += ["", f"raw: one env in a plain loop in this process; ceiling: {os.cpu_count()} such loops in parallel "
              "processes, summed (both measured in every cell, interleaved with the systems).",
              "obs allocs: portal steps (of the tracemalloc window) that allocated >= max(one observation's bytes, 1 KiB).", ""]
    lines += [f"{'PASS' if t['ok'] else 'FAIL'}  {t['target']}  (measured {t['value']:.2f})" for t in targets]
    lines.append(f"leftover /dev/shm entries of this process: {leftovers or 'none'}")
    return "\n".join(lines)


def _grep(path: str, key: str) -> Optional[str]:
    try:
        with open(path) as f:
            return next((line.split(":", 1)[1].strip() for line in f if line.startswith(key)), None)
    except OSError:
        return None


def _version(package: str) -> Optional[str]:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def machine_info() -> dict:
    return {"cpu_model": _grep("/proc/cpuinfo", "model name"), "cpu_count": os.cpu_count(),
            "mem_total": _grep("/proc/meminfo", "MemTotal"), "platform": platform.platform(),
            "python": sys.version.split()[0],
            "versions": {p: _version(p) for p in ("numpy", "gymnasium", "ale-py", "pyzmq", "portal-shm")}}


def own_leftovers() -> list:
    """/dev/shm names (segments and semaphores) that portals of this process left behind."""
    tag = f"psm-{os.getpid()}-"
    return sorted(name for name in os.listdir("/dev/shm") if tag in name) if os.path.isdir("/dev/shm") else []


def parse_args(argv: Optional[list] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n")[-1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    csv = lambda text: [s.strip() for s in text.split(",") if s.strip()]  # noqa: E731
    p.add_argument("--systems", type=csv, default=list(DEFAULT_SYSTEMS),
                   help="comma list of portal,docker,sync,async (default portal,sync,async; docker needs the images)")
    p.add_argument("--scenarios", type=lambda t: [parse_scenario(s) for s in csv(t)],
                   default=[parse_scenario(s) for s in ("null:210x160x3", "null:84x84x4", "ALE/Pong-v5")],
                   help="comma list of null:AxBxC and gymnasium ids (default null:210x160x3,null:84x84x4,ALE/Pong-v5)")
    p.add_argument("--num-envs", type=lambda t: [int(x) for x in csv(t)], default=[1, 2, 4, 8, 16, 64],
                   help="comma list of N (default 1,2,4,8,16,64)")
    p.add_argument("--seconds", type=float, default=2.0, help="timed seconds per run (default 2)")
    p.add_argument("--repeat", type=int, default=3, help="interleaved repetitions per cell (default 3)")
    p.add_argument("--warmup", type=int, default=10, help="untimed batched steps before each run (default 10)")
    p.add_argument("--alloc-steps", type=int, default=200, help="portal steps under tracemalloc (default 200, 0 skips)")
    p.add_argument("--envs-per-server", type=int, default=None, help="portal's envs_per_server (default: its own)")
    p.add_argument("--seed", type=int, default=0, help="seed of resets and action samples (default 0)")
    p.add_argument("--json", metavar="PATH", help="write raw samples, summary and machine info to PATH")
    args = p.parse_args(argv)
    unknown = set(args.systems) - set(SYSTEMS)
    if unknown or not args.systems:
        p.error(f"unknown systems {sorted(unknown)}; choose from {','.join(SYSTEMS)}")
    if args.repeat < 1 or args.seconds <= 0 or min(args.num_envs, default=0) < 1:
        p.error("--repeat, --seconds and every --num-envs value must be positive")
    return args


def main(argv: Optional[list] = None) -> int:
    args = parse_args(argv)
    lat = np.zeros(LATENCY_CAPACITY, np.int64)  # allocated once, reused by every timed run
    samples, allocs, interrupted = [], [], False
    try:
        for sc in args.scenarios:
            for n in args.num_envs:
                alloc = run_cell(sc, n, args, lat, samples)
                allocs += [alloc] if alloc else []
    except KeyboardInterrupt:
        interrupted = True
        print("interrupted: every env was closed; reporting what was measured", file=sys.stderr)
    rows = summarize(samples, allocs)
    targets = check_targets(rows, allocs)
    leftovers = own_leftovers()
    print(render(rows, targets, leftovers), flush=True)
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        report = {"machine": machine_info(), "command": sys.argv, "interrupted": interrupted,
                  "args": {**vars(args), "scenarios": [s.name for s in args.scenarios]},
                  "samples": samples, "allocations": allocs, "summary": rows, "targets": targets,
                  "leftover_shm": leftovers}
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
    return 130 if interrupted else 0


if __name__ == "__main__":
    sys.exit(main())
