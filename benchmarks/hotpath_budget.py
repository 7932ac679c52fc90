#!/usr/bin/env python
"""Where a portal's steps go, against the cores' ceiling: one loss at a time.

For P processes (default: the cores) with E envs each, rounds of ``--seconds`` measure side by
side, interleaved round by round:

- ``ceiling``: P processes, one env each, in a plain loop (``portal-shm bench``'s ceiling);
- ``raw xE``: P processes stepping E envs each in turn, still in a plain loop: what hosting
  several envs in one process costs (caches, allocator);
- ``served xE``: P processes each running a real ``EnvServer`` over a ring of its own, calling
  its ``step`` in a loop (actions read from the ring, results and infos written to it, exactly
  the server's per-step work) with no agent, no doorbell, no other process: what serving costs;
- ``portal``: ``make_vec`` with P servers of E envs, lockstep and (``--batch``) async batches of
  that many envs: the rest is the agent, the wake-ups and sharing the cores with the agent.

Each loss shows as the drop from one row to the next; ``CPU s/1k`` is the CPU seconds of every
process involved per 1,000 env steps.

    python benchmarks/hotpath_budget.py ALE/Pong-v5 --envs 8 --batch 8 --seconds 3 --rounds 3
    python benchmarks/hotpath_budget.py CartPole-v1 --envs 16 --batch 16 --seconds 2 --rounds 5
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import statistics
import time
from typing import Any

import numpy as np

from portal_shm.bench import measure
from portal_shm.bench.ceiling import sample_actions
from portal_shm.bench.cpu import CpuMeter
from portal_shm.bench.scenarios import parse_scenario
from portal_shm.wire.layout import MAILBOX_FIELDS, STATUS_OK


def _raw_loop(envs: list, actions: list) -> tuple:
    """(run, close): ``run(seconds)`` steps the envs in turn, resetting ended episodes."""
    count, k = len(envs), len(actions)

    def run(seconds: float) -> int:
        n = 0
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            for j in range(count):
                _, _, terminated, truncated, _ = envs[j].step(actions[(n + j) % k])
                if terminated or truncated:
                    envs[j].reset()
            n += count
        return n

    return run, lambda: None


def _served_loop(envs: list, actions: list) -> tuple:
    """(run, close): ``run(seconds)`` calls a real EnvServer's ``step`` (autoreset included) over a
    ring of its own; no agent, no doorbell, nothing sent (its socket is never connected to)."""
    from portal_shm.server.loop import NEXT_STEP, EnvServer
    from portal_shm.wire.layout import ring_layout
    from portal_shm.wire.ring import Ring
    from portal_shm.wire.schema import space_to_schema

    count, depth = len(envs), 4
    obs_schema, act_schema = space_to_schema(envs[0].observation_space), space_to_schema(envs[0].action_space)
    ring = Ring.create("portal-shm-budget", ring_layout(obs_schema, act_schema, count, depth, 1, 4096))
    path = f"ipc:///tmp/portal-shm-budget-{os.getpid()}.ctl"
    server = EnvServer({"env_indices": list(range(count)), "server_index": 0, "control_address": path}, envs)
    server.ring, server.autoreset_mode = ring, NEXT_STEP
    server.bind_views(obs_schema, act_schema)
    act = ring.views["act.0"]
    for k in range(depth):
        act[k] = np.asarray([actions[(k * count + j) % len(actions)] for j in range(count)]).reshape(act[k].shape)
    slot, words, seq = [0], memoryview(server.mailbox), MAILBOX_FIELDS.index("seq")

    def run(seconds: float) -> int:
        n, k = 0, slot[0]
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            k = (k + 1) % depth
            words[seq] += 1  # as an agent numbers its commands: one step in SAMPLE_EVERY is sampled
            server.step(k)
            n += count
        slot[0] = k
        if server.mailbox[MAILBOX_FIELDS.index("status")] != STATUS_OK:
            raise RuntimeError("an env raised while served: the measurement is void")
        return n

    def close() -> None:
        server.link.close(agent_gone=False)
        ring.close()

    return run, close


def _worker(kind: str, name: str, count: int, seed: int, go: Any, queue: Any, rounds: int, seconds: float) -> None:
    sc = parse_scenario(name)
    envs = [sc.env_fn()() for _ in range(count)]
    for j, env in enumerate(envs):
        env.reset(seed=seed + j)
    actions = sample_actions(envs[0].action_space, seed)
    run, close = (_raw_loop if kind == "raw" else _served_loop)(envs, actions)
    try:
        run(0.3)  # warm up
        meter = CpuMeter()
        for _ in range(rounds):
            go.wait(timeout=600)
            cpu0 = meter.read()
            start = time.perf_counter()
            steps = run(seconds)
            queue.put((steps, time.perf_counter() - start, meter.read() - cpu0))
    finally:
        close()
        for env in envs:
            env.close()


def _portal(name: str, procs: int, count: int, batch: int, seed: int, seconds: float) -> tuple:
    """(env-steps/s, CPU s/1k) of a portal with ``procs`` servers of ``count`` envs, timed by
    ``portal-shm bench``'s own runs (lockstep, or async batches when ``batch`` is smaller)."""
    import portal_shm

    sc = parse_scenario(name)
    num = procs * count
    kwargs: dict = {"envs_per_server": count}
    if batch < num:
        kwargs["batch_size"] = batch
    envs = portal_shm.make_vec(sc.target, num, **sc.kwargs, vector_kwargs=kwargs)
    try:
        actions = sample_actions(envs.action_space, seed)
        lat = np.zeros(measure.LATENCY_CAPACITY, np.int64)
        if batch < num:
            result = measure.batched_run(envs, actions, seconds, 200, lat, first=True)
        else:
            envs.reset(seed=seed)
            result = measure.timed_run(envs, actions, seconds, 200, lat)
        return result["steps_per_s"], result["cpu_s_per_1k_steps"]
    finally:
        envs.close()


class Pool:
    """P worker processes of one kind that run a round together when asked."""

    def __init__(self, kind: str, name: str, procs: int, count: int, seed: int, rounds: int, seconds: float) -> None:
        ctx = mp.get_context("spawn")
        self.procs, self.go, self.queue = procs, ctx.Barrier(procs + 1), ctx.Queue()
        self.workers = [
            ctx.Process(
                target=_worker,
                args=(kind, name, count, seed + 100 * w, self.go, self.queue, rounds, seconds),
                daemon=True,
            )
            for w in range(procs)
        ]
        for w in self.workers:
            w.start()

    def run(self) -> tuple:
        self.go.wait(timeout=600)
        runs = [self.queue.get(timeout=600) for _ in range(self.procs)]
        steps = sum(r[0] for r in runs)
        return sum(r[0] / r[1] for r in runs), 1000 * sum(r[2] for r in runs) / steps

    def close(self) -> None:
        for w in self.workers:
            w.join(timeout=30)
            if w.is_alive():
                w.terminate()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("scenario")
    parser.add_argument("--procs", type=int, default=len(os.sched_getaffinity(0)))
    parser.add_argument("--envs", type=int, default=8, help="envs per process (E)")
    parser.add_argument("--batch", type=int, default=0, help="also measure async batches of this many envs")
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", help="write the rounds and medians here")
    args = parser.parse_args()

    rows = ["ceiling", f"raw x{args.envs}", f"served x{args.envs}", "portal lockstep"]
    if args.batch:
        rows.append(f"portal batches of {args.batch}")
    pools = {
        "ceiling": Pool("raw", args.scenario, args.procs, 1, args.seed, args.rounds, args.seconds),
        rows[1]: Pool("raw", args.scenario, args.procs, args.envs, args.seed, args.rounds, args.seconds),
        rows[2]: Pool("served", args.scenario, args.procs, args.envs, args.seed, args.rounds, args.seconds),
    }
    results: dict = {row: [] for row in rows}
    try:
        for _ in range(args.rounds):
            for row in rows:
                if row in pools:
                    results[row].append(pools[row].run())
                else:
                    batch = args.batch if row.startswith("portal batches") else args.procs * args.envs
                    results[row].append(_portal(args.scenario, args.procs, args.envs, batch, args.seed, args.seconds))
    finally:
        for pool in pools.values():
            pool.close()
    medians = {
        row: (statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs))
        for row, runs in results.items()
    }
    ceiling = medians["ceiling"][0]
    print(
        f"{args.scenario}: {args.procs} processes x {args.envs} envs, median of {args.rounds} interleaved rounds of {args.seconds} s"
    )
    print(f"{'':24} {'env-steps/s':>12} {'x ceiling':>10} {'CPU s/1k':>9}")
    for row in rows:
        rate, cpu = medians[row]
        print(f"{row:24} {rate:12,.0f} {rate / ceiling:10.2f} {cpu:9.4f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "rounds": results, "medians": medians}, f, indent=1)


if __name__ == "__main__":
    main()
