"""The Atari preset's step with its frames played on ale_py's emulator directly, against frame by frame.

    python benchmarks/atari_direct_frames.py [--env ALE/Pong-v5] [--blocks 10] [--steps 500]

One env of ``portal_shm.presets:atari`` (84x84 grey, stack 4, frame skip 4) in this process, the
two paths of ``AtariFrames`` (``direct`` on and off) stepped in alternating blocks with random
actions; prints each path's median microseconds per agent step and the median per-block ratio.
The env server runs exactly this code per env, so the saving is the server's.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from portal_shm.server.presets import AtariFrames, atari


def _frames(env):
    while not isinstance(env, AtariFrames):
        env = env.env
    return env


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="ALE/Pong-v5")
    parser.add_argument("--blocks", type=int, default=10)
    parser.add_argument("--steps", type=int, default=500)
    args = parser.parse_args()
    envs = {"direct": atari(args.env), "frame by frame": atari(args.env)}
    _frames(envs["frame by frame"]).direct = False
    assert _frames(envs["direct"]).direct, "this ale_py's AtariEnv cannot be stepped directly"
    rng = np.random.default_rng(0)
    micros: dict = {name: [] for name in envs}
    for env in envs.values():
        env.reset(seed=0)
    for _ in range(args.blocks):
        for name, env in envs.items():
            actions = rng.integers(0, env.action_space.n, args.steps)
            start = time.perf_counter()
            for action in actions:
                _, _, terminated, truncated, _ = env.step(action)
                if terminated or truncated:
                    env.reset()
            micros[name].append((time.perf_counter() - start) / args.steps * 1e6)
    for name, values in micros.items():
        print(f"{name:15s} median {np.median(values):7.1f} us per agent step")
    ratio = np.median(np.array(micros["frame by frame"]) / np.array(micros["direct"]))
    print(f"frame by frame / direct: median per-block ratio {ratio:.3f} ({args.env})")
    for env in envs.values():
        env.close()


if __name__ == "__main__":
    main()
