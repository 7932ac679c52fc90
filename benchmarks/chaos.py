#!/usr/bin/env python
"""Chaos soak: portals of every kind step real envs while faults are injected at random times.

For ``--minutes``, portals ("lanes") step CartPole-v1 and ALE/Pong-v5 on the process backend, the
docker backend (image portal-shm/ale; skipped, with the reason, without Docker) and a remote
``portal-shm host`` on 127.0.0.1 reached through an emulated link (``portal_shm.bench.link``),
all with ``on_env_failure="restart"``; the Pong lanes also recycle their servers with small
limits. A seeded driver injects faults (``chaos_faults.py``): SIGKILL or SIGSTOP a server, kill
and restart the host, cut the link for a second. Every env's every transition is checked against
an in-process replay of the same seeds and actions (``chaos_reference.py``): a step is lost when it
differs beyond the truncations README "Reliability" documents for restarts. Recycling must change
nothing at all. At the end nothing of the run may be left (processes, containers, run directories,
/dev/shm entries, the remote lane's key directory, what ``portal-shm gc --dry-run`` would
collect), and the agent's RSS and open descriptors must be flat (benchmarks/soak.py's rule: last
quarter of the samples against the second; RSS by their medians within 5 %, descriptors by their floors exactly, since recoveries in
flight hold descriptors for a while and a leak raises the floor). Ctrl-C or SIGTERM stop the run early, cleanly, with the report of what ran.

    python benchmarks/chaos.py --minutes 5 --json benchmarks/results/chaos_5min.json

Exits 0 when no step was lost, every fault recovered, nothing was left and the agent stayed flat.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import sys
import time
from dataclasses import asdict, dataclass, field
from typing import NamedTuple, Optional

import gymnasium as gym
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # chaos_*.py and soak.py beside it

from chaos_faults import HOST_RESTART, KINDS, LINK_CUT, SIGKILL, SIGSTOP, Fault, percentiles, schedule  # noqa: E402
from chaos_lane import Lane  # noqa: E402
from chaos_leftovers import wait_for_nothing_left  # noqa: E402
from soak import _open_fds, _rss_bytes, verdict  # noqa: E402

import portal_shm  # noqa: E402
from portal_shm.bench.link import Link  # noqa: E402
from portal_shm.remote.host.spawn import HostProcess, LocalKeys  # noqa: E402
from portal_shm.runtimes.gc import collect  # noqa: E402

BACKENDS = ("process", "docker", "remote")
FLOORS_NOTE = " (the quarters' floors)"


@dataclass
class Settings:
    minutes: float = 5.0
    seed: int = 0
    backends: tuple = BACKENDS
    fault_interval: float = 4.0  # mean seconds between faults
    step_timeout: float = 3.0
    heartbeat_timeout: float = 5.0  # remote: well above the 1 s link cut, which must lose nothing
    sample_interval: float = 5.0
    drain_s: float = 60.0  # after the last fault, time for open faults to recover
    pong_episode_steps: int = 400  # short episodes: more autoresets and recycles per minute
    recycle: dict = field(default_factory=lambda: {"episodes": 2, "seconds": 60, "jitter": 0.2})
    link_delay_ms: float = 2.0


class RemoteHost:
    """A ``portal-shm host`` on 127.0.0.1 behind a Link; killed and restarted on the same port.

    Started from the main thread only: a HostProcess dies with the thread that started it."""

    def __init__(self, keys: LocalKeys, delay: float) -> None:
        self.keys = keys
        self.host = HostProcess(keys)
        self.port = int(self.host.address.rpartition(":")[2])
        self.pids = {self.host.process.pid}
        self.link = Link(self.host.address, delay=delay).start()

    def kill(self) -> None:
        """SIGKILL the host process alone, as a crash of it would: its env servers see it gone."""
        self.host.process.send_signal(signal.SIGKILL)
        self.host.process.wait()  # (its run directory: freed by the host started in its place)

    def start(self) -> None:
        self.host = HostProcess(self.keys, port=self.port)
        self.pids.add(self.host.process.pid)

    def close(self) -> None:
        self.link.close()
        self.host.stop()


class LaneSpec(NamedTuple):
    name: str
    env_id: str
    num_envs: int
    env_kwargs: dict  # for the portal's envs and their references alike
    vector_kwargs: dict  # beside the restart policy every lane has
    options: dict  # make_vec's backend keywords
    takes: tuple  # the fault kinds it is given


def lanes_of(backend: str, settings: Settings, remote: Optional[RemoteHost]) -> list:
    pong = {"max_episode_steps": settings.pong_episode_steps}
    recycle = {"recycle": settings.recycle}
    signals = (SIGKILL, SIGSTOP)
    if backend == "process":
        return [
            LaneSpec("process-cartpole", "CartPole-v1", 8, {}, {"envs_per_server": 2}, {}, signals),
            LaneSpec("process-pong", "ALE/Pong-v5", 4, pong, recycle, {}, signals),
        ]
    if backend == "docker":
        options = {"backend": "docker", "image": "portal-shm/ale"}
        return [LaneSpec("docker-pong", "ALE/Pong-v5", 2, pong, recycle, options, signals)]
    assert remote is not None
    options = {"backend": "remote", "hosts": [remote.link.address], "heartbeat_timeout": settings.heartbeat_timeout}
    options.update(remote.keys.options())
    return [
        LaneSpec("remote-cartpole", "CartPole-v1", 4, {}, {"envs_per_server": 2}, options, (HOST_RESTART, LINK_CUT))
    ]


def docker_missing() -> Optional[str]:
    """Why the docker lane cannot run here, or None."""
    try:
        from portal_shm.runtimes.docker import DockerUnavailableError, docker_client

        client = docker_client()
    except (ImportError, DockerUnavailableError) as exc:
        return f"no Docker: {exc}"
    try:
        client.images.get("portal-shm/ale")
    except Exception:
        return "no image portal-shm/ale (portal-shm build ale)"
    return None


class Chaos:
    """The lanes, the host, the driver's schedule and the samples of one run."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.rng = np.random.default_rng(settings.seed)
        self.lanes: list = []
        self.keys: Optional[LocalKeys] = None  # the remote lane's agent and host keys, removed at close
        self.remote: Optional[RemoteHost] = None
        self.skipped: dict = {}
        self.samples: list = []
        self.injected: list = []
        self.interrupted = False  # set by Ctrl-C or SIGTERM: the run ends at the next check

    def interrupt(self, *_: object) -> None:
        self.interrupted = True

    def start(self) -> None:
        import ale_py

        gym.register_envs(ale_py)
        s = self.settings
        if "docker" in s.backends and (reason := docker_missing()):
            self.skipped["docker"] = reason
        if "remote" in s.backends:
            self.keys = LocalKeys.temporary("portal-shm-chaos-")
            self.remote = RemoteHost(self.keys, s.link_delay_ms / 1e3)
        vector = {"on_env_failure": "restart", "max_restarts": 1000, "step_timeout": s.step_timeout}
        for backend in [b for b in s.backends if b not in self.skipped]:
            for spec in lanes_of(backend, s, self.remote):
                if self.interrupted:
                    return
                kwargs = {**spec.options, **spec.env_kwargs, "vector_kwargs": {**vector, **spec.vector_kwargs}}
                envs = portal_shm.make_vec(spec.env_id, spec.num_envs, **kwargs)
                make_env = lambda e=spec.env_id, kw=spec.env_kwargs: gym.make(e, **kw)  # noqa: E731
                seed = s.seed * 1000 + 100 * len(self.lanes)
                self.lanes.append(Lane(spec.name, envs, make_env, seed, spec.takes, s.step_timeout))
        for lane in self.lanes:
            lane.thread.start()

    def run(self) -> None:
        s = self.settings
        takes = {kind for lane in self.lanes for kind in lane.takes}
        plan = schedule(s.seed, tuple(k for k in KINDS if k in takes), s.fault_interval, s.minutes * 60)
        started = time.monotonic()
        next_sample = next_print = started
        while time.monotonic() - started < s.minutes * 60 and not self.interrupted:
            now = time.monotonic()
            if now >= next_sample:
                self.sample(now - started)
                next_sample = now + s.sample_interval
            if now >= next_print + 60:
                next_print = now
                print(self.progress(now - started), flush=True)
            if plan and now - started >= plan[0][0]:
                self.inject(plan.pop(0)[1])
            time.sleep(0.02)
        deadline = time.monotonic() + s.drain_s
        while any(lane.open and lane.alive for lane in self.lanes) and time.monotonic() < deadline:
            if self.interrupted:
                break
            time.sleep(0.1)
        self.sample(time.monotonic() - started)

    def inject(self, kind: str) -> None:
        lanes = [lane for lane in self.lanes if kind in lane.takes and lane.alive]
        if not lanes:
            return
        lane = lanes[int(self.rng.integers(len(lanes)))]
        self.injected.append(kind)
        if kind in (SIGKILL, SIGSTOP):
            pick, mid_step, resume = (
                int(self.rng.integers(1 << 16)),
                bool(self.rng.random() < 0.5),
                bool(self.rng.random() < 0.5),
            )
            lane.request(kind, pick, mid_step, resume)
            return
        assert self.remote is not None
        envs = tuple(range(lane.num_envs))
        if kind == LINK_CUT:
            lane.add_fault(Fault(kind, lane.name, envs, time.monotonic(), "link cut for 1 s"))
            self.remote.link.cut(1.0)
            return
        downtime = float(self.rng.uniform(0.2, 2.0))
        lane.add_fault(Fault(kind, lane.name, envs, time.monotonic(), f"host down {downtime:.1f} s"))
        self.remote.kill()
        time.sleep(downtime)
        self.remote.start()

    def sample(self, t: float) -> None:
        pid = os.getpid()
        steps = sum(lane.steps for lane in self.lanes)
        self.samples.append(
            {"t": round(t, 1), "steps": steps, "agent_rss": _rss_bytes(pid), "agent_fds": _open_fds(pid)}
        )

    def progress(self, t: float) -> str:
        lost = sum(lane.lost for lane in self.lanes)
        checked = sum(lane.checked for lane in self.lanes)
        return f"[{t / 60:.1f} min] {len(self.injected)} faults, {checked:,} transitions checked, {lost} lost"

    def close(self) -> dict:
        """Stop and close everything; what of the run is left after."""
        for lane in self.lanes:
            lane.stop.set()
        for lane in self.lanes:
            if lane.thread.is_alive():
                lane.thread.join(3 * self.settings.step_timeout + 60)
        for lane in self.lanes:
            try:
                lane.close()
            except Exception as exc:
                lane.error = lane.error or f"close: {type(exc).__name__}: {exc}"
        owners = {os.getpid()}
        try:
            if self.remote is not None:
                self.remote.close()
                owners |= self.remote.pids
        finally:
            if self.keys is not None:
                self.keys.remove()  # (secret keys first)
        servers = set().union(*(lane.seen_pids for lane in self.lanes))
        left = wait_for_nothing_left(owners, servers, 20.0)
        left["key_dirs"] = [self.keys.root] if self.keys is not None and os.path.exists(self.keys.root) else []
        return left


def report(chaos: Chaos, left: dict, seconds: float) -> dict:
    lanes = [lane.summary() for lane in chaos.lanes]
    faults = {}
    for kind in KINDS:
        done = [f for lane in chaos.lanes for f in lane.done if f.kind == kind]
        still = [f for lane in chaos.lanes for f in lane.open if f.kind == kind]
        recovery = percentiles([f.recovery_s for f in done])
        faults[kind] = {
            "injected": chaos.injected.count(kind),
            "recovered": len(done),
            "unresolved": len(still),
            "recovery_s": recovery,
        }
    agent = verdict(chaos.samples, ("agent_rss", "agent_fds"), floors=("agent_fds",))
    lost = sum(lane["lost"] for lane in lanes)
    flat = all(v.get("flat", False) for v in agent.values() if isinstance(v, dict)) and "note" not in agent
    ok = (
        lost == 0
        and not any(lane["error"] or lane["counter_mismatches"] or lane["unresolved_faults"] for lane in lanes)
        and not any(left.values())
        and flat
    )
    return {
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(), "platform": platform.platform()},
        "settings": {**asdict(chaos.settings), "backends": list(chaos.settings.backends)},
        "seconds": round(seconds, 1),
        "interrupted": chaos.interrupted,
        "skipped": chaos.skipped,
        "faults": faults,
        "steps_checked": sum(lane["transitions_checked"] for lane in lanes),
        "steps_lost": lost,
        "lanes": lanes,
        "fault_log": [
            {"kind": f.kind, "lane": f.lane, "detail": f.detail, "envs": list(f.envs), "recovery_s": f.recovery_s}
            for lane in chaos.lanes
            for f in lane.done + lane.open
        ],
        "left_behind": left,
        "gc_dry_run_nothing_to_collect": not collect(dry_run=True),
        "agent": agent,
        "agent_flat": flat,
        "ok": ok,
        "samples": chaos.samples,
    }


def run(settings: Settings) -> dict:
    """One chaos soak; the report, also when Ctrl-C or SIGTERM ended it early.

    Both only set a flag while the run lasts (an exception raised in the middle of restarting a
    host or starting a portal would leak what was half made); the run ends at its next check and
    closes everything as at its end.
    """
    chaos = Chaos(settings)
    started = time.monotonic()
    previous = {sig: signal.signal(sig, chaos.interrupt) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        try:
            chaos.start()
            chaos.run()
        finally:
            left = chaos.close()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return report(chaos, left, time.monotonic() - started)


def render(result: dict) -> str:
    """The report as text."""
    s = result["settings"]
    lines = [
        f"chaos soak: {result['seconds']:.0f} s ({s['minutes']} min of faults, seed {s['seed']}), "
        f"backends {', '.join(s['backends'])}" + (" (interrupted)" if result["interrupted"] else ""),
    ]
    lines += [f"  skipped {name}: {why}" for name, why in result["skipped"].items()]
    lines.append("faults (injected, recovered, unresolved; recovery p50/max from injection to the first good step):")
    for kind, f in result["faults"].items():
        r = f["recovery_s"]
        timing = f"{r['p50']:.2f} / {r['max']:.2f} s" if r["p50"] is not None else "-"
        lines.append(f"  {kind:<13} {f['injected']:>4} {f['recovered']:>4} {f['unresolved']:>3}   {timing}")
    lines.append("lanes (steps, transitions checked, lost, restarts, recycles):")
    for lane in result["lanes"]:
        lines.append(
            f"  {lane['lane']:<17} {lane['steps']:>8,} {lane['transitions_checked']:>9,} {lane['lost']:>4} "
            f"{lane['restarts']:>5} {lane['recycles']:>5}" + (f"  ERROR {lane['error']}" if lane["error"] else "")
        )
        for problem in lane["counter_mismatches"] + lane["unresolved_faults"]:
            lines.append(f"      {problem}")
    lines.append(f"steps checked {result['steps_checked']:,}, steps lost {result['steps_lost']}")
    agent = result["agent"]
    for key, unit, scale in (("agent_rss", "MiB", 2**20), ("agent_fds", "fds", 1)):
        a = agent.get(key)
        if a:
            lines.append(
                f"{key}: early {a['early_median'] / scale:.1f} {unit}, late {a['late_median'] / scale:.1f} {unit}"
                f"{FLOORS_NOTE if a.get('by') == 'floor' else ''} "
                f"(growth {a['growth'] * 100:+.2f} %, {'flat' if a['flat'] else 'NOT flat'})"
            )
        else:
            lines.append(f"{key}: {agent.get('note', 'no samples')}")
    left = {k: v for k, v in result["left_behind"].items() if v}
    lines.append(
        f"left behind: {left if left else 'nothing'}; gc --dry-run nothing to collect: "
        f"{result['gc_dry_run_nothing_to_collect']}"
    )
    lines.append("OK" if result["ok"] else "FAILED")
    return "\n".join(lines)


def main(argv: Optional[list] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=5.0, help="how long faults are injected")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--backends", default=",".join(BACKENDS), help="comma-separated: process,docker,remote")
    parser.add_argument("--fault-interval", type=float, default=4.0, help="mean seconds between faults")
    parser.add_argument("--step-timeout", type=float, default=3.0)
    parser.add_argument("--sample-interval", type=float, default=5.0, help="seconds between agent RSS/fd samples")
    parser.add_argument("--json", help="write the report here")
    args = parser.parse_args(argv)
    settings = Settings(
        minutes=args.minutes,
        seed=args.seed,
        backends=tuple(b.strip() for b in args.backends.split(",")),
        fault_interval=args.fault_interval,
        step_timeout=args.step_timeout,
        sample_interval=args.sample_interval,
    )
    result = run(settings)
    print(render(result), flush=True)
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(result, handle, indent=1)
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
