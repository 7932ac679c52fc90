"""What recording one env costs: Pong at N=16, stepped plain and under ``RecordVideo`` recording env
0's every episode, side by side in interleaved rounds (the order rotates each round) so that drift
hits all alike. Ratios are taken round by round (recorded / plain); the target is >= 0.97x.

Two recorded portals: with the default ``info_capacity`` (4096 bytes per env) a 210x160x3 frame
spills to the step's control message (``EXTRA``), and with ``info_capacity`` above the frame's size
it rides in the ring's info row instead. All portals are made with ``render_mode="rgb_array"``
(which costs ALE nothing until it renders): the difference is env 0 rendering after each step on
its server, its frame's trip to the agent, and the wrapper's encoder thread feeding ffmpeg.

    python benchmarks/record_overhead.py --rounds 6 --seconds 5
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import sys
import tempfile
import time

import numpy as np

import portal_shm


def run(envs, actions: np.ndarray, seconds: float) -> float:
    """Env steps per second of ``envs`` (lockstep) over ``seconds``, after a short warm-up."""
    for t in range(20):
        envs.step(actions[t % len(actions)])
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        envs.step(actions[steps % len(actions)])
        steps += 1
    return steps * envs.num_envs / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("env_id", nargs="?", default="ALE/Pong-v5")
    parser.add_argument("-n", "--num-envs", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--seconds", type=float, default=5.0)
    args = parser.parse_args()
    folder = tempfile.mkdtemp(prefix="record-overhead-")
    big_rows = {"info_capacity": 128 * 1024}
    systems = {
        "plain": portal_shm.make_vec(args.env_id, args.num_envs, render_mode="rgb_array"),
        "recorded": portal_shm.RecordVideo(
            portal_shm.make_vec(args.env_id, args.num_envs, render_mode="rgb_array"),
            os.path.join(folder, "extra"),
            env_indices=[0],
        ),
        "recorded, 128 KiB info rows": portal_shm.RecordVideo(
            portal_shm.make_vec(args.env_id, args.num_envs, render_mode="rgb_array", vector_kwargs=big_rows),
            os.path.join(folder, "rows"),
            env_indices=[0],
        ),
    }
    rng = np.random.default_rng(0)
    actions = rng.integers(0, systems["plain"].single_action_space.n, size=(4096, args.num_envs))
    for envs in systems.values():
        envs.reset(seed=0)
    names = list(systems)
    rates: dict = {name: [] for name in names}
    try:
        for r in range(args.rounds):
            for name in names[r % len(names) :] + names[: r % len(names)]:
                rates[name].append(run(systems[name], actions, args.seconds))
    finally:
        for envs in systems.values():
            envs.close()
    print(f"# {datetime.date.today().isoformat()}: python benchmarks/record_overhead.py {' '.join(sys.argv[1:])}")
    print(f"# {platform.node()}: {os.cpu_count()} cores, python {platform.python_version()}, {platform.platform()}")
    print(f"{args.env_id} N={args.num_envs}, lockstep, {args.rounds} interleaved rounds of {args.seconds:g} s each")
    width = max(map(len, names))
    for name in names:
        values = ", ".join(f"{v:,.0f}" for v in rates[name])
        print(f"  {name:<{width}}  median {statistics.median(rates[name]):>7,.0f} env steps/s  (rounds: {values})")
    for name in names[1:]:
        ratios = [b / a for a, b in zip(rates["plain"], rates[name])]
        recorder = systems[name]
        print(
            f"  {name} / plain: median {statistics.median(ratios):.3f}x (rounds {min(ratios):.3f}-{max(ratios):.3f}; "
            f"target >= 0.97x); env 0: {len(recorder.videos)} videos, {sum(recorder.frame_counts.values()):,} frames"
        )


if __name__ == "__main__":
    main()
