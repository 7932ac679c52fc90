"""Multi-agent throughput: portal-shm's ``make_vec_ma`` against SuperSuit's and PufferLib's vectorization.

Every system steps the same PettingZoo envs (the same count, random actions from one pool) and hands
back the layout parameter sharing trains on, ``(num_envs * k, ...)`` agent rows:

- ``portal``: ``make_vec_ma(env, N).flat()`` (env servers as the process backend spreads them);
- ``supersuit``: ``concat_vec_envs_v1(pettingzoo_env_to_vec_env_v1(env), N, num_cpus=CPUS,
  base_class="gymnasium")``, its multiprocess path (SB3's SubprocVecEnv design);
- ``pufferlib``: ``pufferlib.vector.make(PettingZooPufferEnv, backend=Multiprocessing, num_envs=N,
  num_workers=CPUS)``, run by ``--puffer-python``: PufferLib pins its own torch, so it lives in a venv
  of its own (``uv venv /tmp/pufferenv && uv pip install pufferlib-core pettingzoo[butterfly] mpe2``).
  Its workers spin on shared memory for 0.5 s after each step: on a machine with fewer free cores
  than workers + 1 they steal each other's time, so ``pufferlib:1`` (one worker) is measured too.

Each (round, env, system) runs in a fresh process (idle workers of another system, PufferLib's spin
for 0.5 s, would steal the cores), the systems in a rotated order per round; figures are medians over
rounds, ratios medians of per-round ratios (this VM's figures move 10-30 % between runs).

    python benchmarks/multi_agent_bench.py --num-envs 8 --seconds 5 --rounds 3 \\
        --systems portal,supersuit,pufferlib,pufferlib:1 --puffer-python /tmp/pufferenv/bin/python --out benchmarks/results/multi_agent_2core.txt

The worker half (``--worker``) imports nothing of portal-shm unless it runs the portal system, so the
PufferLib venv runs this file as it is.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import time

ENVS = {
    "mpe": ("mpe2.simple_spread_v3:parallel_env", {"max_cycles": 25}),  # cheap: 3 agents, 18 floats each
    "pistonball": ("pettingzoo.butterfly.pistonball_v6:parallel_env", {"continuous": False}),  # 20 agents, images
}
SYSTEMS = ("portal", "supersuit", "pufferlib")


def make_parallel_env(target: str, kwargs: dict, **ignored: object):
    """One PettingZoo ParallelEnv; PufferLib passes ``buf`` and ``seed`` to its creators."""
    module, _, name = target.partition(":")
    return getattr(importlib.import_module(module), name)(**kwargs)


def open_system(system: str, env: str, num_envs: int, cpus: int):
    """The system's vector env over ``num_envs`` copies of ``env``, and its number of agent rows.
    ``NAME:W`` runs SuperSuit's or PufferLib's with ``W`` workers instead of ``cpus``."""
    target, kwargs = ENVS[env]
    system, _, workers = system.partition(":")
    cpus = int(workers or cpus)
    if system == "portal":
        import portal_shm

        vec = portal_shm.make_vec_ma(target, num_envs, env_kwargs=kwargs).flat()
        return vec, vec.num_envs
    if system == "supersuit":
        import supersuit

        single = supersuit.pettingzoo_env_to_vec_env_v1(make_parallel_env(target, kwargs))
        vec = supersuit.concat_vec_envs_v1(single, num_envs, num_cpus=cpus, base_class="gymnasium")
        return vec, vec.num_envs
    if system == "pufferlib":
        import pufferlib.emulation
        import pufferlib.vector

        creator = functools.partial(pufferlib.emulation.PettingZooPufferEnv, env_creator=make_parallel_env)
        vec = pufferlib.vector.make(
            creator,
            env_kwargs={"env_args": [target, kwargs]},
            backend=pufferlib.vector.Multiprocessing,
            num_envs=num_envs,
            num_workers=cpus,
        )
        return vec, vec.num_agents
    raise SystemExit(f"unknown system {system!r}: one of {SYSTEMS}")


def worker(system: str, env: str, num_envs: int, cpus: int, seconds: float, warmup: int) -> dict:
    """Step one system for ``seconds`` after ``warmup`` steps: env-steps/s and agent-steps/s."""
    import numpy as np

    started = time.perf_counter()
    vec, rows = open_system(system, env, num_envs, cpus)
    try:
        startup = time.perf_counter() - started
        actions = np.random.default_rng(0).integers(0, 3, (64, rows))  # legal in both envs (3 and 5 actions)
        vec.reset(seed=0)
        for t in range(warmup):
            vec.step(actions[t % 64])
        steps, begin = 0, time.perf_counter()
        while time.perf_counter() - begin < seconds:
            vec.step(actions[steps % 64])
            steps += 1
        elapsed = time.perf_counter() - begin
    finally:
        vec.close()
    return {"env_steps": steps * num_envs / elapsed, "agent_steps": steps * rows / elapsed, "startup": startup}


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as file:
            return next(line.split(":", 1)[1].strip() for line in file if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.machine()


def run_worker(python: str, system: str, env: str, args: argparse.Namespace) -> dict:
    command = [python, os.path.abspath(__file__), "--worker", system, env]
    command += ["--num-envs", str(args.num_envs), "--cpus", str(args.cpus), "--seconds", str(args.seconds)]
    command += ["--warmup", str(args.warmup)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=args.seconds * 10 + 300)
    if done.returncode:
        raise RuntimeError(f"{system} on {env} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--worker", nargs=2, metavar=("SYSTEM", "ENV"), help=argparse.SUPPRESS)
    parser.add_argument("--envs", default="mpe,pistonball", help=f"comma-separated, of {sorted(ENVS)}")
    parser.add_argument(
        "--systems", default=",".join(SYSTEMS), help="NAME:W: SuperSuit's or PufferLib's with W workers"
    )
    parser.add_argument("--num-envs", type=int, default=8, help="PettingZoo envs per system (agent rows: N * k)")
    parser.add_argument("--cpus", type=int, default=os.cpu_count() or 2, help="SuperSuit's and PufferLib's workers")
    parser.add_argument("--seconds", type=float, default=5.0, help="timed stepping per measurement")
    parser.add_argument("--warmup", type=int, default=20, help="untimed steps first")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--puffer-python", default="", help="the interpreter of a venv with pufferlib(-core)")
    parser.add_argument("--note", default="", help="a line about the machine, written into --out")
    parser.add_argument("--out", default="", help="also write the table here")
    args = parser.parse_args()
    if args.worker:
        system, env = args.worker
        print(json.dumps(worker(system, env, args.num_envs, args.cpus, args.seconds, args.warmup)))
        return

    envs, systems = args.envs.split(","), args.systems.split(",")
    pythons = {system: sys.executable for system in systems}
    skipped = []
    puffers = [system for system in systems if system.startswith("pufferlib")]
    if puffers and args.puffer_python and os.path.exists(args.puffer_python):
        pythons.update((system, args.puffer_python) for system in puffers)
    elif puffers:
        systems = [system for system in systems if system not in puffers]
        skipped.append("pufferlib: no --puffer-python venv with pufferlib-core (it pins its own torch)")
    results: dict = {(env, system): [] for env in envs for system in systems}
    rounds: list = []
    for round_index in range(args.rounds):
        order = systems[round_index % len(systems) :] + systems[: round_index % len(systems)]
        for env in envs:
            for system in order:
                figures = run_worker(pythons[system], system, env, args)
                results[env, system].append(figures)
                rounds.append(f"round {round_index + 1} {env:10} {system:12} {figures['agent_steps']:>10,.0f}")
                print(rounds[-1], flush=True)

    lines = [
        f"# {time.strftime('%Y-%m-%d')}: python benchmarks/multi_agent_bench.py " + shlex.join(sys.argv[1:]),
        f"# {os.cpu_count()} CPUs ({cpu_model()}), load average "
        f"{os.getloadavg()[0]:.1f} at the end; {args.num_envs} envs per system, {args.rounds} interleaved rounds "
        f"of {args.seconds:g} s, medians; ratio: portal / system, median of per-round ratios",
    ]
    lines += [f"# {args.note}"] if args.note else []
    lines += [f"# skipped {reason}" for reason in skipped]
    lines.append(
        f"{'env':11} {'system':12} {'agent-steps/s':>14} {'env-steps/s':>12} {'start-up s':>11}  ratio (per-round range)"
    )
    for env in envs:
        for system in systems:
            runs = results[env, system]
            ratio = ""
            if system != "portal" and "portal" in systems:
                ratios = [p["agent_steps"] / s["agent_steps"] for p, s in zip(results[env, "portal"], runs)]
                ratio = f"{statistics.median(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f})"
            lines.append(
                f"{env:11} {system:12} {statistics.median(r['agent_steps'] for r in runs):>14,.0f} "
                f"{statistics.median(r['env_steps'] for r in runs):>12,.0f} "
                f"{statistics.median(r['startup'] for r in runs):>11.1f}  {ratio}"
            )
    lines.append("# per round, agent-steps/s in the order measured")
    lines += rounds
    print("\n".join(lines))
    if args.out:
        with open(args.out, "w") as file:
            file.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
