"""Atari as people train it (84x84 grey, max-pooled frameskip 4, stack 4: envpool's defaults), through
``portal_shm.envpool`` beside ale_py's ``AtariVectorEnv`` with the same settings (and envpool where
it is installed), interleaved round by round.

    python benchmarks/atari_training_config.py [--game Pong] [--num-envs 8] [--batch-size 8] [--seconds 5] [--rounds 5]

``portal_shm.envpool`` hosts the games in ALE's vector env inside its env servers (one per batch);
"per-env presets" is the same drop-in with the numpy preset per env (a server per core), what
runtimes without ALE's vector env run. Each system runs envpool's async API (``async_reset``, then ``recv`` a batch and ``send`` its
actions back); with ``--batch-size`` equal to ``--num-envs`` that is lockstep. ALE's vector env
gets a thread per core. Prints each system's median env-steps/s and the median per-round ratio of
portal_shm.envpool to ALE's vector env.
"""

from __future__ import annotations

import argparse
import time
from typing import Any, Callable

import numpy as np


def portal(game: str, n: int, batch: int, seed: int) -> Any:
    import portal_shm.envpool as envpool

    return envpool.make(f"{game}-v5", env_type="gymnasium", num_envs=n, batch_size=batch, seed=seed)


def portal_per_env(game: str, n: int, batch: int, seed: int) -> Any:
    """``portal_shm.envpool`` with the per-env numpy preset (what runtimes without ALE's vector env
    get): fixing ``envs_per_server`` (a server per core) turns the native hosting off."""
    import os

    import portal_shm.envpool as envpool

    per_server = max(1, min(batch, n // len(os.sched_getaffinity(0))))
    return envpool.make(
        f"{game}-v5",
        env_type="gymnasium",
        num_envs=n,
        batch_size=batch,
        seed=seed,
        vector_kwargs={"envs_per_server": per_server},
    )


def envpool_itself(game: str, n: int, batch: int, seed: int) -> Any:
    import envpool

    return envpool.make(f"{game}-v5", env_type="gymnasium", num_envs=n, batch_size=batch, seed=seed)


def ale_vector(game: str, n: int, batch: int, seed: int) -> Any:
    """ALE's vector env (``portal-shm bench``'s ale-vector system) set to envpool's Atari defaults."""
    from portal_shm.bench import BenchOptions, parse_scenarios
    from portal_shm.bench.ale_vector_system import ALE_TRAINING, AleVector

    scenarios = parse_scenarios([f"ALE/{game}-v5"])
    options = BenchOptions(scenarios, num_envs=[n], batch_size=batch, seed=seed)
    return AleVector(scenarios[0], n, options, config=ALE_TRAINING)


def run(envs: Any, seconds: float, rng: np.random.Generator, started: bool) -> float:
    if not started:
        envs.async_reset()
    steps, warm, end = 0, time.perf_counter() + 1.0, None
    while True:
        info = envs.recv()[-1]
        ids = np.asarray(info["env_id"])
        envs.send(rng.integers(0, 6, len(ids)), ids)
        now = time.perf_counter()
        if end is None and now > warm:
            start, end, steps = now, now + seconds, 0
        elif end is not None:
            steps += len(ids)
            if now > end:
                return steps / (now - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--game", default="Pong")
    parser.add_argument("--num-envs", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=None)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    batch = args.batch_size or args.num_envs
    makers: dict[str, Callable[..., Any]] = {
        "portal_shm.envpool": portal,
        "ale-vector": ale_vector,
        "per-env presets": portal_per_env,
    }
    try:
        import envpool  # noqa: F401

        makers["envpool"] = envpool_itself
    except ImportError:
        print("envpool is not installed here: its column is left out")
    systems = {name: make(args.game, args.num_envs, batch, 0) for name, make in makers.items()}
    rng = np.random.default_rng(0)
    sps: dict = {name: [] for name in systems}
    try:
        for r in range(args.rounds):
            for name, envs in systems.items():
                sps[name].append(run(envs, args.seconds, rng, started=r > 0))
    finally:
        for envs in systems.values():
            envs.recv()  # the last batch sent: none left in flight at close
            envs.close()
    for name, values in sps.items():
        print(f"{name:20s} median {np.median(values):8,.0f} env-steps/s  rounds {[round(v) for v in values]}")
    ratio = np.median(np.array(sps["portal_shm.envpool"]) / np.array(sps["ale-vector"]))
    print(
        f"portal_shm.envpool / ale-vector: median per-round ratio {ratio:.2f} ({args.game}, N={args.num_envs}, batch {batch})"
    )
    ratio = np.median(np.array(sps["per-env presets"]) / np.array(sps["ale-vector"]))
    print(f"per-env presets / ale-vector: median per-round ratio {ratio:.2f}")
    if "envpool" in sps:
        ratio = np.median(np.array(sps["portal_shm.envpool"]) / np.array(sps["envpool"]))
        print(f"portal_shm.envpool / envpool: median per-round ratio {ratio:.2f}")


if __name__ == "__main__":
    main()
