"""Where the time of ``portal_shm.envpool`` goes: a py-spy profile of the agent and its env servers
while the drop-in steps an Atari task with random actions, folded into a few named shares.

envpool steps its envs in C++ threads, preprocessing included (grey, resize, frame stack); the
drop-in runs envpool's settings as gymnasium wrappers in Python env servers. The question this
answers is how much of a server's time is the emulator itself (which envpool pays too) and how much
is everything around it (wrappers, preprocessing, the server loop, waiting for the agent), and the
same for the agent. Shares are of the samples py-spy took in each process (``--idle``: time spent
blocked counts, as "waiting"); a sample goes to the innermost frame that matches a category below.

    python benchmarks/profile_envpool_dropin.py Pong-v5 -n 8 --seconds 20
    python benchmarks/profile_envpool_dropin.py Breakout-v5 -n 8 --batch-size 4 --raw breakout.txt

Needs py-spy (``pip install py-spy``) and the right to ptrace the processes it samples (root, or
``kernel.yama.ptrace_scope=0``).
"""

from __future__ import annotations

import argparse
import atexit
import collections
import datetime
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

from portal_shm import envpool

# (share, pattern on "function (file:line)"), the first match from the innermost frame outwards.
CATEGORIES = [
    (
        "waiting (spin, doorbell wait, poll)",
        re.compile(r"^(spin_until|Waiter\.wait|\w+\.wait_command|.*poll) |\(selectors"),
    ),
    ("doorbell ring (pipe write)", re.compile(r"^Bell\.ring ")),
    ("emulator (ale_py AtariEnv.step: ALE act, frame skip)", re.compile(r"^AtariEnv\.step \(")),
    ("screen read (ale_py _get_obs)", re.compile(r"^AtariEnv\._get_obs \(")),
    ("ale_py reset", re.compile(r"^AtariEnv\.reset \(")),
    ("preprocessing (portal-shm presets: grey, resize, stack)", re.compile(r"\(portal_shm/server/presets\.py")),
    ("gymnasium wrappers", re.compile(r"\(gymnasium/")),
    ("portal-shm server loop (ring writes, infos)", re.compile(r"\(portal_shm/(server|wire)/")),
    ("portal-shm agent (portal, envpool drop-in)", re.compile(r"\(portal_shm/(agent|envpool)")),
    ("numpy", re.compile(r"\(numpy/")),
    ("this script (random actions)", re.compile(r"profile_envpool_dropin\.py")),
]
OTHER = "other"
PROCESS = re.compile(r'process (\d+):"(?:[^"\\]|\\.)*";')  # (a command line may hold ";")


def classify(frames: list) -> str:
    for frame in reversed(frames):
        for name, pattern in CATEGORIES:
            if pattern.search(frame):
                return name
    return OTHER


def fold(raw_path: str, agent_pid: int) -> dict:
    """{"agent" | "servers": Counter(category -> samples)} from py-spy's raw (collapsed) output."""
    shares: dict = {"agent": collections.Counter(), "servers": collections.Counter()}
    with open(raw_path) as handle:
        for line in handle:
            stack, _, count = line.rstrip("\n").rpartition(" ")
            if not stack or not count.isdigit():
                continue
            processes = [int(pid) for pid in PROCESS.findall(stack)]  # a child's stacks nest under its parents'
            pid = processes[-1] if processes else agent_pid
            frames = [f for f in PROCESS.sub("", stack).split(";") if f and not f.startswith("thread ")]
            if not frames or not frames[0].startswith("<module>"):
                continue  # a helper thread (zmq's, the server's watchdog): idle by design, not the step's time
            side = "agent" if pid == agent_pid else "servers"
            shares[side][classify(frames)] += int(count)
    return shares


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("task_id", nargs="?", default="Pong-v5")
    parser.add_argument("-n", "--num-envs", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=None, help="async batches of this size (default: lockstep)")
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--rate", type=int, default=200, help="py-spy samples per second")
    parser.add_argument("--raw", help="keep py-spy's collapsed stacks in this file")
    args = parser.parse_args()
    spy = shutil.which("py-spy")
    if spy is None:
        sys.exit("py-spy is not installed: pip install py-spy")
    if args.raw:
        raw = args.raw
    else:
        scratch = tempfile.mkdtemp(prefix="profile-envpool-")
        atexit.register(shutil.rmtree, scratch, True)
        raw = os.path.join(scratch, "stacks.txt")
    pool = envpool.make(args.task_id, num_envs=args.num_envs, batch_size=args.batch_size, seed=0)
    rng = np.random.default_rng(0)
    n_actions = pool.action_space.n
    batch = args.batch_size or args.num_envs
    steps = 0
    try:
        pool.async_reset()
        for _ in range(50):  # warm-up before sampling starts
            _, _, _, _, info = pool.recv()
            pool.send(rng.integers(0, n_actions, batch), info["env_id"])
        command = [spy, "record", "--pid", str(os.getpid()), "--subprocesses", "--idle", "--nonblocking"]
        command += ["--rate", str(args.rate), "--duration", str(int(args.seconds)), "--format", "raw", "-o", raw]
        recorder = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        started = time.perf_counter()
        while recorder.poll() is None:
            _, _, _, _, info = pool.recv()
            pool.send(rng.integers(0, n_actions, batch), info["env_id"])
            steps += batch
        elapsed = time.perf_counter() - started
        pool.recv()  # (nothing pending at close)
        if recorder.returncode != 0:
            sys.exit(f"py-spy failed: {recorder.stderr.read().strip()[-2000:]}")
    finally:
        pool.close()
    shares = fold(raw, os.getpid())
    mode = f"async batches of {batch}" if args.batch_size else "lockstep"
    print(
        f"# {datetime.date.today().isoformat()}: python benchmarks/profile_envpool_dropin.py {' '.join(sys.argv[1:])}"
    )
    print(f"# {platform.node()}: {os.cpu_count()} cores, python {platform.python_version()}, {platform.platform()}")
    kept = f" ({raw})" if args.raw else ""
    print(f"{args.task_id} N={args.num_envs}, {mode}: {steps / elapsed:,.0f} env steps/s while sampled{kept}")
    for side, counts in shares.items():
        total = sum(counts.values()) or 1
        print(f"  {side}: {total:,} samples")
        for name, count in counts.most_common():
            print(f"    {100 * count / total:5.1f} %  {name}")


if __name__ == "__main__":
    main()
