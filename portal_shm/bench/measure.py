"""Timed runs of one system: env-steps/s, per-step latency, the agent process's CPU share, the
CPU the whole system spent per 1,000 env steps, and the agent-side allocation check.

A run is a warm-up (``warmup`` untimed batched steps, at most ``seconds / 4`` long), then ``seconds`` of
steps with precomputed actions; each call is timed with ``perf_counter_ns`` into a preallocated
array, so the timing itself allocates nothing. The agent's CPU share is ``process_time`` (CPU
seconds of every thread of this process) over wall time: 1.0 is one core busy in the agent, and
threads an alternative runs inside the agent (envpool) count too; child processes do not.
``cpu_s_per_1k_steps`` counts them, and the env servers, too (``cpu.CpuMeter``).
"""

from __future__ import annotations

import time
import tracemalloc
from typing import Any

import numpy as np

from .cpu import CpuMeter

LATENCY_CAPACITY = 1 << 21  # batched steps one timed run may record


def _warm_up(step: Any, count: int, seconds: float) -> None:
    """``count`` steps, stopping early after a quarter of ``seconds`` (large N, slow envs)."""
    end = time.perf_counter() + seconds / 4
    for i in range(count):
        step(i)
        if time.perf_counter() > end:
            break


def _result(n: int, env_steps: int, wall_ns: int, cpu_s: float, system_cpu_s: float, lat: np.ndarray) -> dict:
    elapsed = max(wall_ns / 1e9, 1e-9)
    p50, p99 = (np.percentile(lat[:n], [50, 99]) / 1e3) if n else (np.nan, np.nan)
    return {
        "batched_steps": n,
        "env_steps": env_steps,
        "seconds": elapsed,
        "steps_per_s": env_steps / elapsed,
        "p50_us": float(p50),
        "p99_us": float(p99),
        "mean_us": float(lat[:n].mean() / 1e3) if n else None,
        "agent_cpu": cpu_s / elapsed,
        "cpu_s_per_1k_steps": 1000 * system_cpu_s / env_steps if env_steps else None,
    }


def timed_run(envs: Any, actions: list, seconds: float, warmup: int, lat: np.ndarray) -> dict:
    """Lockstep: every ``step`` advances all ``num_envs`` envs; latency is per batched step."""
    k = len(actions)
    _warm_up(lambda i: envs.step(actions[i % k]), warmup, seconds)
    n, cap, num_envs = 0, len(lat), envs.num_envs
    meter = CpuMeter(envs)
    system0 = meter.read()
    cpu0 = time.process_time()
    start = now = time.perf_counter_ns()
    end = start + int(seconds * 1e9)
    while (now < end or n == 0) and n < cap:
        before = time.perf_counter_ns()
        envs.step(actions[n % k])
        now = time.perf_counter_ns()
        lat[n] = now - before
        n += 1
    cpu1 = time.process_time()
    return _result(n, n * num_envs, now - start, cpu1 - cpu0, meter.read() - system0, lat)


def batched_run(envs: Any, actions: list, seconds: float, warmup: int, lat: np.ndarray, first: bool) -> dict:
    """Async batches (envpool's API): ``recv()`` returns the first ``batch_size`` envs done,
    ``send(actions, env_ids)`` sends those back; latency is per ``recv``. The first run of a
    system starts the pipeline (``async_reset``); later runs go on with the steps in flight."""
    k = len(actions)
    if first:
        envs.async_reset()

    def cycle(i: int) -> int:
        info = envs.recv()[-1]
        ids = np.asarray(info["env_id"])
        envs.send(np.asarray(actions[i % k])[: len(ids)], ids)
        return len(ids)

    _warm_up(cycle, warmup, seconds)
    n = env_steps = 0
    cap = len(lat)
    meter = CpuMeter(envs)
    system0 = meter.read()
    cpu0 = time.process_time()
    start = now = time.perf_counter_ns()
    end = start + int(seconds * 1e9)
    while (now < end or n == 0) and n < cap:
        before = time.perf_counter_ns()
        env_steps += cycle(n)
        now = time.perf_counter_ns()
        lat[n] = now - before
        n += 1
    cpu1 = time.process_time()
    return _result(n, env_steps, now - start, cpu1 - cpu0, meter.read() - system0, lat)


def obs_bytes(space: Any) -> int:
    import gymnasium as gym

    if isinstance(space, gym.spaces.Box):
        return int(np.prod(space.shape)) * space.dtype.itemsize
    return int(gym.spaces.flatten(space, space.sample()).nbytes)


def agent_allocations(envs: Any, actions: list, steps: int, warmup: int, seconds: float = 1e9) -> dict:
    """Per step, the peak of traced memory above its level before the step (transient); over the
    window, blocks of at least one observation's bytes still alive at its end. The threshold is
    at least 1 KiB: every step allocates a few hundred bytes of Python objects. At most ``steps``
    steps, and no more than fit in about ``seconds`` (at least 10)."""
    threshold = max(1024, obs_bytes(envs.single_observation_space))
    k = len(actions)
    _warm_up(lambda i: envs.step(actions[i % k]), warmup, seconds)
    transient = np.zeros(steps, np.int64)

    def big_blocks() -> int:
        return sum(1 for t in tracemalloc.take_snapshot().traces if t.size >= threshold)

    tracemalloc.start()
    try:
        before = big_blocks()  # tracemalloc also sees numpy's data buffers
        end, done = time.perf_counter() + seconds, 0
        for i in range(steps):
            tracemalloc.reset_peak()
            level, _ = tracemalloc.get_traced_memory()
            envs.step(actions[i % k])
            transient[i] = tracemalloc.get_traced_memory()[1] - level
            done = i + 1
            if done >= 10 and time.perf_counter() > end:
                break
        retained = big_blocks() - before
    finally:
        tracemalloc.stop()
    transient = transient[:done]
    return {
        "steps": done,
        "obs_bytes": threshold,
        "steps_with_obs_sized_alloc": int((transient >= threshold).sum()),
        "max_transient_bytes": int(transient.max()) if done else 0,
        "mean_transient_bytes": float(transient.mean()) if done else 0.0,
        "retained_obs_sized_blocks": int(retained),
    }
