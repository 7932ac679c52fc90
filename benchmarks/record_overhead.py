"""What recording one env costs: Pong at N=16, stepped plain and under ``RecordVideo`` recording env
0's every episode, side by side. Each round gives every system ``--seconds`` of stepping in blocks
of ``--block`` steps taken in turn (a few tenths of a second each), so that a load that comes and
goes on a shared machine hits all systems alike; ratios are taken round by round (recorded /
plain) and the target is >= 0.97x.

Two recorded portals: the usual one, whose env 0 renders into its frame ring (after the first
frame, which tells the agent the frames' shape), and one held to the fallback path that portals
without a frame ring use (env hosts, Ray): every frame in env 0's info, which with the default
``info_capacity`` (4096 bytes per env) spills to the step's control message (``EXTRA``). All
portals are made with ``render_mode="rgb_array"`` (which costs ALE nothing until it renders): the
difference is env 0 rendering after each step on its server, its frame's trip to the agent, and
the wrapper's encoder thread feeding ffmpeg. The CPU each system took is counted too (its servers
and the agent while it steps, its ffmpeg processes whenever they ran), in cores busy.

    python benchmarks/record_overhead.py --rounds 6 --seconds 5
"""

from __future__ import annotations

import argparse
import atexit
import datetime
import os
import platform
import shutil
import statistics
import sys
import tempfile
import threading
import time

import numpy as np

import portal_shm

_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User and system CPU seconds of process ``pid`` so far (0 once it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            fields = handle.read().rpartition(")")[2].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / _TICKS


class EncoderClock:
    """CPU seconds of this process's ffmpeg children, by the folder each writes into (a video's
    ffmpeg lives for one episode). Each is sampled every 100 ms, from 0 when it started after the
    clock did; only processes new since the last look are read, so watching costs next to nothing."""

    def __init__(self, folders: dict[str, str]) -> None:
        self.folders = folders  # system -> its videos' folder
        self.spans: dict[int, list] = {}  # ffmpeg pid -> [system, CPU seconds at first, at last look]
        self.known: set[str] = set()
        self.look(first=True)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.watch, daemon=True)
        self.thread.start()

    def look(self, first: bool = False) -> None:
        names = set(os.listdir("/proc"))
        for name in names - self.known:
            if not name.isdigit():
                continue
            try:
                with open(f"/proc/{name}/stat") as handle:
                    stat = handle.read()
                with open(f"/proc/{name}/cmdline", "rb") as handle:
                    command = handle.read().decode(errors="replace")
            except OSError:
                continue
            comm, rest = stat[stat.index("(") + 1 : stat.rindex(")")], stat[stat.rindex(")") + 2 :].split()
            system = next((s for s, folder in self.folders.items() if folder + os.sep in command), None)
            if int(rest[1]) == os.getpid() and "ffmpeg" in comm and system is not None:
                self.spans[int(name)] = [system, cpu_seconds(int(name)) if first else 0.0, 0.0]
        self.known = names
        for pid, span in self.spans.items():
            span[2] = max(span[2], cpu_seconds(pid))

    def watch(self) -> None:
        while not self.stop.wait(0.1):
            self.look()

    def totals(self) -> dict[str, float]:
        self.stop.set()
        self.thread.join()
        self.look()
        out = dict.fromkeys(self.folders, 0.0)
        for system, first, last in self.spans.values():
            out[system] += max(0.0, last - first)
        return out


def block(envs, actions: np.ndarray, steps: int, start: int, cpu: dict) -> float:
    """Seconds ``envs`` took for ``steps`` lockstep steps; adds its servers' and the agent's CPU seconds."""
    pids = [os.getpid()] + [server["pid"] for server in envs.servers]
    before = [cpu_seconds(pid) for pid in pids]
    began = time.perf_counter()
    for t in range(start, start + steps):
        envs.step(actions[t % len(actions)])
    elapsed = time.perf_counter() - began
    after = [cpu_seconds(pid) for pid in pids]
    cpu["agent"] += after[0] - before[0]
    cpu["servers"] += sum(after[1:]) - sum(before[1:])
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("env_id", nargs="?", default="ALE/Pong-v5")
    parser.add_argument("-n", "--num-envs", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--seconds", type=float, default=5.0, help="each system's stepping time per round")
    parser.add_argument("--block", type=int, default=100, help="steps a system takes before the next one's turn")
    args = parser.parse_args()
    folder = tempfile.mkdtemp(prefix="record-overhead-")
    atexit.register(shutil.rmtree, folder, True)  # (the videos are only counted)
    folders = {"recorded": os.path.join(folder, "ring"), "recorded, frames in infos": os.path.join(folder, "infos")}
    loads = [os.getloadavg()[0]]
    systems = {
        "plain": portal_shm.make_vec(args.env_id, args.num_envs, render_mode="rgb_array"),
        "recorded": portal_shm.RecordVideo(
            portal_shm.make_vec(args.env_id, args.num_envs, render_mode="rgb_array"),
            folders["recorded"],
            env_indices=[0],
        ),
        "recorded, frames in infos": portal_shm.RecordVideo(
            portal_shm.make_vec(args.env_id, args.num_envs, render_mode="rgb_array"),
            folders["recorded, frames in infos"],
            env_indices=[0],
            frame_rings=False,
        ),
    }
    rng = np.random.default_rng(0)
    actions = rng.integers(0, systems["plain"].single_action_space.n, size=(4096, args.num_envs))
    names = list(systems)
    steps = dict.fromkeys(names, 0)
    for name, envs in systems.items():
        envs.reset(seed=0)
        block(envs, actions, 50, 0, dict.fromkeys(("agent", "servers"), 0.0))  # warm-up
    rates: dict = {name: [] for name in names}
    cpu: dict = {name: dict.fromkeys(("agent", "servers", "ffmpeg", "seconds"), 0.0) for name in names}
    try:
        for r in range(args.rounds):
            spent = dict.fromkeys(names, 0.0)
            done = dict.fromkeys(names, 0)
            clock = EncoderClock(folders)
            order = names[r % len(names) :] + names[: r % len(names)]
            while min(spent.values()) < args.seconds:
                for name in order:
                    spent[name] += block(systems[name], actions, args.block, steps[name], cpu[name])
                    steps[name] += args.block
                    done[name] += args.block
            for name, seconds in clock.totals().items():
                cpu[name]["ffmpeg"] += seconds
            for name in names:
                rates[name].append(done[name] * args.num_envs / spent[name])
                cpu[name]["seconds"] += spent[name]
            loads.append(os.getloadavg()[0])
    finally:
        for envs in systems.values():
            envs.close()
    print(f"# {datetime.date.today().isoformat()}: python benchmarks/record_overhead.py {' '.join(sys.argv[1:])}")
    print(f"# {platform.node()}: {os.cpu_count()} cores, python {platform.python_version()}, {platform.platform()}")
    print(f"# load average (1 min) before and after each round: {', '.join(f'{x:.2f}' for x in loads)}")
    print(
        f"{args.env_id} N={args.num_envs}, lockstep, {args.rounds} rounds of {args.seconds:g} s per system "
        f"in turns of {args.block} steps"
    )
    width = max(map(len, names))
    for name in names:
        values = ", ".join(f"{v:,.0f}" for v in rates[name])
        print(f"  {name:<{width}}  median {statistics.median(rates[name]):>7,.0f} env steps/s  (rounds: {values})")
    for name in names[1:]:
        ratios = [b / a for a, b in zip(rates["plain"], rates[name])]
        recorder = systems[name]
        print(
            f"  {name} / plain: median {statistics.median(ratios):.3f}x (rounds {min(ratios):.3f}-{max(ratios):.3f}; "
            f"target >= 0.97x); env 0: {len(recorder.videos)} videos, {sum(recorder.frame_counts.values()):,} frames, "
            f"{recorder.stalls} steps waited for the encoder"
        )
    print("  CPU per system (cores busy while it stepped; ffmpeg: its encoders' CPU over the same time):")
    for name in names:
        use = cpu[name]
        seconds = use["seconds"] or 1.0
        per_step = 1e3 * (use["agent"] + use["servers"] + use["ffmpeg"]) / (steps[name] or 1)
        print(
            f"    {name:<{width}}  agent {use['agent'] / seconds:.2f}, servers {use['servers'] / seconds:.2f}, "
            f"ffmpeg {use['ffmpeg'] / seconds:.3f}; {per_step:.2f} ms of CPU per step"
        )


if __name__ == "__main__":
    main()
