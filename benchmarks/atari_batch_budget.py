"""Where the CPU goes in Atari batches as people train them (84x84 grey, stack 4: envpool's defaults).

    python benchmarks/atari_batch_budget.py [--game Pong] [--num-envs 16] [--batch-size 8] [--seconds 4] [--rounds 2]

Two questions, answered side by side in one run:

1. **Does a server per batch cost by itself?** ALE's ``AtariVectorEnv`` handing out the first
   ``batch`` of ``num_envs`` games (its async batches, a thread per core, in this process) beside
   ``num_envs / batch`` plain processes, each stepping ``batch`` games in an ``AtariVectorEnv`` of
   ``cores / processes`` threads in lockstep: the layout of ``portal_shm.envpool``, without the agent
   or the ring.
2. **What does the portal spend?** ``portal_shm.envpool`` in the same batches, with the CPU of every
   thread of the agent and its env servers read from ``/proc`` over the timed seconds: the ALE
   threads, each server's main thread, the agent, and what stayed idle.

Prints env-steps/s of each, and the CPU shares (cores) of the portal's threads.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import time
from typing import Any

import numpy as np


def settings() -> dict:
    from portal_shm.bench.ale_vector_system import ALE_TRAINING

    return dict(ALE_TRAINING)


def steps_per_s(step: Any, seconds: float) -> float:
    """Run ``step()`` (returns the env steps it made) for a second untimed, then ``seconds`` timed."""
    warm = time.perf_counter() + 1.0
    while time.perf_counter() < warm:
        step()
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        steps += step()
    return steps / (time.perf_counter() - start)


def ale_batches(game: str, n: int, batch: int, seconds: float) -> float:
    from ale_py.vector_env import AtariVectorEnv

    env = AtariVectorEnv(game=game, num_envs=n, batch_size=batch, num_threads=os.cpu_count() or 1, **settings())
    rng = np.random.default_rng(0)
    _, info = env.reset(seed=0)
    env.send(rng.integers(0, 6, len(info["env_id"])))

    def step() -> int:
        info = env.recv()[-1]
        env.send(rng.integers(0, 6, len(info["env_id"])))
        return len(info["env_id"])

    try:
        return steps_per_s(step, seconds)
    finally:
        env.close()


def _lockstep_process(game: str, n: int, threads: int, seconds: float, seed: int, out: Any) -> None:
    from ale_py.vector_env import AtariVectorEnv

    env = AtariVectorEnv(game=game, num_envs=n, num_threads=threads, **settings())
    rng = np.random.default_rng(seed)
    env.reset(seed=seed)

    def step() -> int:
        env.step(rng.integers(0, 6, n))
        return n

    out.put(steps_per_s(step, seconds))
    env.close()


def server_layout(game: str, n: int, batch: int, seconds: float) -> float:
    """``n / batch`` processes of ``batch`` games each, in lockstep, the cores shared among them."""
    processes = n // batch
    threads = max(1, (os.cpu_count() or 1) // processes)
    out: Any = mp.get_context("spawn").Queue()
    workers = [
        mp.get_context("spawn").Process(target=_lockstep_process, args=(game, batch, threads, seconds, 7 + i, out))
        for i in range(processes)
    ]
    for worker in workers:
        worker.start()
    total = sum(out.get() for _ in workers)
    for worker in workers:
        worker.join()
    return total


def thread_cpu(pids: list) -> dict:
    """CPU seconds of every thread of ``pids``: (pid, tid) -> seconds."""
    ticks = os.sysconf("SC_CLK_TCK")
    out = {}
    for pid in pids:
        for tid in os.listdir(f"/proc/{pid}/task"):
            try:
                with open(f"/proc/{pid}/task/{tid}/stat") as handle:
                    fields = handle.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            out[(pid, int(tid))] = (int(fields[11]) + int(fields[12])) / ticks
    return out


def portal_budget(game: str, n: int, batch: int, seconds: float) -> tuple:
    """``portal_shm.envpool``'s env-steps/s, and the cores its threads used: (agent, server main
    threads, ALE threads, idle)."""
    import portal_shm.envpool as envpool

    envs = envpool.make(f"{game.capitalize()}-v5", env_type="gymnasium", num_envs=n, batch_size=batch, seed=1)
    rng = np.random.default_rng(0)
    envs.async_reset()
    pids = [os.getpid()] + [int(s["pid"]) for s in envs.portal.servers if s.get("pid")]
    marks: dict = {}

    def step() -> int:
        info = envs.recv()[-1]
        ids = info["env_id"]
        envs.send(rng.integers(0, 6, len(ids)), ids)
        return len(ids)

    def timed() -> int:
        if not marks:
            marks["cpu"], marks["at"] = thread_cpu(pids), time.perf_counter()
        return step()

    try:
        for _ in range(200):
            step()
        rate = steps_per_s(timed, seconds)
        wall = time.perf_counter() - marks["at"]
        used = {key: value - marks["cpu"].get(key, 0.0) for key, value in thread_cpu(pids).items()}
    finally:
        envs.close()
    agent = sum(v for (pid, _), v in used.items() if pid == pids[0]) / wall
    mains = sum(v for (pid, tid), v in used.items() if pid != pids[0] and pid == tid) / wall
    workers = sum(v for (pid, tid), v in used.items() if pid != pids[0] and pid != tid) / wall
    idle = max(0.0, (os.cpu_count() or 1) - agent - mains - workers)
    return rate, agent, mains, workers, idle


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--game", default="pong")
    parser.add_argument("--num-envs", type=int, default=16)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    game, n, batch = args.game.lower(), args.num_envs, args.batch_size
    if n % batch:
        parser.error("--num-envs must be a multiple of --batch-size")
    for round_ in range(args.rounds):
        ale = ale_batches(game, n, batch, args.seconds)
        layout = server_layout(game, n, batch, args.seconds)
        rate, agent, mains, workers, idle = portal_budget(game, n, batch, args.seconds)
        print(
            f"round {round_}: AtariVectorEnv batches {ale:,.0f}  |  {n // batch} lockstep processes of {batch} "
            f"{layout:,.0f} ({layout / ale:.2f}x)  |  portal_shm.envpool {rate:,.0f} ({rate / ale:.2f}x)",
            flush=True,
        )
        print(
            f"         portal's cores: ALE threads {workers:.2f}, server main threads {mains:.2f}, "
            f"agent {agent:.2f}, idle {idle:.2f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
