"""References every vector env is measured against: the env's raw single-process speed and the
N-core ceiling.

``raw`` steps one env in a plain loop in the agent's process (no vector env, no transport).
``ceiling`` runs ``os.cpu_count()`` such loops at once in separate processes and sums their rates:
the most env-steps per second this machine gives the env, whatever the vector env.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import threading
import time
from typing import Any

from .cpu import CpuMeter
from .scenarios import Scenario, parse_scenario

ACTION_BATCHES = 256  # distinct precomputed action batches every system cycles through


def sample_actions(space: Any, seed: int, count: int = ACTION_BATCHES) -> list:
    """Precomputed actions (no sampling cost inside timed loops), the same for a given seed."""
    space.seed(seed)
    return [space.sample() for _ in range(count)]


def raw_run(env: Any, actions: list, seconds: float, min_steps: int = 0) -> dict:
    """One env stepped in a plain loop, resetting when an episode ends: ``{steps, seconds, cpu_s}``
    (``cpu_s``: CPU seconds of this process and its children meanwhile, such as ViZDoom's engine)."""
    k, n = len(actions), 0
    meter = CpuMeter()
    cpu0 = meter.read()
    start = now = time.perf_counter()
    while now - start < seconds or n < min_steps:
        _, _, terminated, truncated, _ = env.step(actions[n % k])
        if terminated or truncated:
            env.reset()
        n += 1
        now = time.perf_counter()
    return {"steps": n, "seconds": max(now - start, 1e-9), "cpu_s": meter.read() - cpu0}


def raw_loop(env: Any, actions: list, seconds: float, min_steps: int = 0) -> float:
    """``raw_run``'s env-steps/s."""
    run = raw_run(env, actions, seconds, min_steps)
    return run["steps"] / run["seconds"]


def single_env(sc: Scenario, seed: int, warmup: int) -> tuple:
    """One warmed-up env of the scenario in this process, and its actions."""
    env = sc.env_fn()()
    actions = sample_actions(env.action_space, seed)
    env.reset(seed=seed)
    raw_loop(env, actions, 0.0, warmup)
    return env, actions


def _worker(name: str, seconds: float, seed: int, warmup: int, go: Any, stop: Any, queue: Any) -> None:
    env, actions = single_env(parse_scenario(name), seed, warmup)
    try:
        while True:
            go.wait(timeout=900)  # a broken barrier (the agent gave up or died) ends the worker
            if stop.is_set():
                return
            queue.put(raw_run(env, actions, seconds))
    except (KeyboardInterrupt, threading.BrokenBarrierError):  # Ctrl-C reaches the whole process group
        pass
    finally:
        env.close()


class CeilingPool:
    """``os.cpu_count()`` processes with one env each that run raw loops together on demand."""

    def __init__(self, sc: Scenario, seconds: float, seed: int, warmup: int) -> None:
        ctx = mp.get_context("spawn")
        self.workers, self.seconds = os.cpu_count() or 1, seconds
        self.go, self.stop, self.queue = ctx.Barrier(self.workers + 1), ctx.Event(), ctx.Queue()
        self.procs = [
            ctx.Process(
                target=_worker, daemon=True, args=(sc.name, seconds, seed + w, warmup, self.go, self.stop, self.queue)
            )
            for w in range(self.workers)
        ]
        for p in self.procs:
            p.start()

    def run(self) -> tuple:
        """One simultaneous round of raw loops: (summed env-steps/s, CPU seconds per 1,000 steps)."""
        self.go.wait(timeout=300)  # the first round also waits for the workers to build their envs
        runs = [self.queue.get(timeout=60 + 2 * self.seconds) for _ in range(self.workers)]
        steps = sum(r["steps"] for r in runs)
        return sum(r["steps"] / r["seconds"] for r in runs), 1000 * sum(r["cpu_s"] for r in runs) / max(steps, 1)

    def close(self, failed: bool = False) -> None:
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
