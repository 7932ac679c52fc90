#!/usr/bin/env python
"""Load on one env host: many agent keys, many sessions, opened and closed all the time; the host's
memory, descriptors and threads must stay flat, and nothing may be left behind.

A ``portal-shm host`` (``HostProcess``) serves ``--agents`` keys with ``--sessions-per-agent``
sessions each (CartPole-v1 and NullEnv 64x64x3 in turn, ``--envs`` envs a session), all stepping
in lockstep from this process (every session's step sent, then every reply taken). Every
``--churn-every`` seconds one session is closed and a fresh one opened for the same key. One
CartPole session is never closed: every step of it is compared with gymnasium's SyncVectorEnv.
Every ``--interval`` seconds the host process's RSS, descriptors and threads are read from /proc.

A series is flat when its level over the last quarter of the samples (median) is within the
tolerance of its steady level over the second quarter (the first quarter is warm-up): RSS 10 %,
descriptors 16 (one session's worth: a closed session's are freed a moment after its close
returns), threads 3. At the end every session is closed and the host stopped: no env server of
it may be left, its descriptors must be back at their idle level, and ``portal-shm gc --dry-run``
must find nothing to collect.

    python benchmarks/host_load.py --minutes 10 --json benchmarks/results/host_load_10min.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from typing import Any, Callable, Optional

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the repository root: testkit/

import gymnasium as gym  # noqa: E402

import portal_shm  # noqa: E402
from portal_shm.remote.host.spawn import HostProcess, LocalKeys  # noqa: E402
from testkit.compare import assert_same, snapshot  # noqa: E402
from testkit.hosts import add_agent_key  # noqa: E402
from testkit.procs import alive, descendants, eventually, fd_count, rss_bytes, start_time, thread_count  # noqa: E402

KINDS = (("CartPole-v1", {}), ("portal_shm.server.example_envs:NullEnv", {"shape": (64, 64, 3)}))
SERIES = ("rss", "fds", "threads")
TOLERANCE = {"rss": ("relative", 0.10), "fds": ("absolute", 16), "threads": ("absolute", 3)}


class Session:
    """One agent session on the host: a remote portal of ``kind`` with key number ``agent``."""

    def __init__(self, address: str, host_key: str, client_key: str, agent: int, kind: int, envs: int) -> None:
        env_id, env_kwargs = KINDS[kind]
        self.agent, self.kind = agent, kind
        self.envs = portal_shm.make_vec(
            env_id, envs, backend="remote", hosts=[address], host_key=host_key, client_key=client_key, **env_kwargs
        )
        self.actions = np.zeros(envs, np.int64)
        self.envs.reset(seed=agent)

    def close(self) -> None:
        self.envs.close()


def _sample(pid: int, started: float, **extra: Any) -> dict:
    return {
        "t": round(time.monotonic() - started, 2),
        "rss": rss_bytes(pid),
        "fds": fd_count(pid),
        "threads": thread_count(pid),
        "servers": len(descendants(pid)),
        **extra,
    }


def summarize(samples: list) -> dict:
    """Per series: start, end, max, the steady level (second quarter), the late level (last
    quarter), and whether the late level is within the tolerance of the steady one."""
    n = len(samples)
    out: dict = {}
    for key in SERIES:
        values = [s[key] for s in samples]
        entry: dict = {"start": values[0], "end": values[-1], "max": max(values)} if values else {}
        if n >= 8:
            steady = statistics.median(values[n // 4 : n // 2])
            late = statistics.median(values[3 * n // 4 :])
            how, tolerance = TOLERANCE[key]
            limit = steady * (1 + tolerance) if how == "relative" else steady + tolerance
            entry.update(steady=steady, late=late, limit=limit, flat=late <= limit)
        else:
            entry.update(flat=None, note=f"only {n} samples: too few to judge")
        out[key] = entry
    return out


def run_load(
    minutes: float = 10.0,
    agents: int = 10,
    sessions_per_agent: int = 5,
    envs: int = 1,
    interval: float = 5.0,
    churn_every: float = 2.0,
    root: Optional[str] = None,
    log: Callable[[str], None] = print,
) -> dict:
    """Run the load; the report (``json.dump``-able). The keys go in ``root``, else in a temporary
    directory removed at the end, secret keys first."""
    keys = LocalKeys(root) if root else LocalKeys.temporary("host-load-")
    try:
        return _run_load(keys, minutes, agents, sessions_per_agent, envs, interval, churn_every, log)
    finally:
        if not root:
            keys.remove()


def _run_load(
    keys: LocalKeys,
    minutes: float,
    agents: int,
    sessions_per_agent: int,
    envs: int,
    interval: float,
    churn_every: float,
    log: Callable[[str], None],
) -> dict:
    client_keys = [keys.agent] + [add_agent_key(keys, f"agent{i}") for i in range(1, agents)]
    host = HostProcess(keys, "--entry-points", "portal_shm.server.example_envs:*")
    pid = host.process.pid
    rng = np.random.default_rng(0)
    sessions: list = []
    seen: dict = {}  # env server pid -> its start time: every one the host ran
    errors: list = []
    samples: list = []
    latencies: list = []
    opened = closed = rounds = reference_steps = 0
    open_seconds: list = []
    time.sleep(0.5)  # the host's threads all up: its idle level
    idle_start = {"fds": fd_count(pid), "threads": thread_count(pid), "rss": rss_bytes(pid)}
    reference = expected = None

    def note_servers() -> None:
        for server in descendants(pid):
            seen.setdefault(server, start_time(server))

    def open_session(agent: int, kind: int) -> Session:
        nonlocal opened
        began = time.monotonic()
        session = Session(host.address, keys.host_key, client_keys[agent], agent, kind, envs)
        open_seconds.append(time.monotonic() - began)
        opened += 1
        note_servers()
        return session

    started = time.monotonic()
    try:
        reference = portal_shm.make_vec(
            "CartPole-v1", envs, backend="remote", hosts=[host.address], host_key=keys.host_key, client_key=keys.agent
        )
        opened += 1
        expected = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1")] * envs)
        assert_same(snapshot(reference.reset(seed=123)), expected.reset(seed=123), "reference reset")
        for slot in range(agents * sessions_per_agent - 1):
            agent = (slot + 1) % agents
            sessions.append(open_session(agent, slot % 2))
        log(f"{opened} sessions of {agents} keys open after {time.monotonic() - started:.1f} s; stepping")
        started = next_sample = next_churn = time.monotonic()
        deadline = started + minutes * 60
        while True:
            now = time.monotonic()
            if now >= next_sample:
                note_servers()
                samples.append(_sample(pid, started, sessions=len(sessions) + 1, rounds=rounds))
                next_sample = now + interval
                if len(samples) % max(1, int(60 / interval)) == 0:
                    s = samples[-1]
                    log(
                        f"{s['t']:6.0f} s: rss {s['rss'] / 2**20:.1f} MiB, {s['fds']} fds, {s['threads']} threads, "
                        f"{s['servers']} env servers, {rounds} rounds"
                    )
                if now >= deadline:
                    break
            if now >= next_churn:
                index = int(rng.integers(len(sessions)))
                old = sessions[index]
                old.close()
                closed += 1
                sessions[index] = open_session(old.agent, 1 - old.kind)
                next_churn = time.monotonic() + churn_every
            actions = rng.integers(0, 2, envs)
            began = time.perf_counter()
            reference.step_async(actions)
            for session in sessions:
                session.envs.step_async(session.actions)
            result = reference.step_wait()
            for session in sessions:
                session.envs.step_wait()
            latencies.append(time.perf_counter() - began)
            assert_same(snapshot(result), expected.step(actions), f"reference step {reference_steps}")
            reference_steps += 1
            rounds += 1
    except Exception as exc:
        errors.append(f"{type(exc).__name__}: {exc}")
        log(f"error: {errors[-1]}")
    elapsed = time.monotonic() - started
    for session in sessions:
        try:
            session.close()
            closed += 1
        except Exception as exc:
            errors.append(f"closing a session: {exc}")
    for envs_ in (reference, expected):
        if envs_ is not None:
            envs_.close()
    left_behind = _left_behind(host, pid, seen, idle_start)
    summary = summarize(samples)
    flat = {key: bool(summary[key].get("flat")) for key in SERIES}
    report = {
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "options": {
            "minutes": minutes,
            "agents": agents,
            "sessions_per_agent": sessions_per_agent,
            "envs": envs,
            "interval": interval,
            "churn_every": churn_every,
        },
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(), "platform": platform.platform()},
        "host_limits": _banner_limits(host.log),
        "seconds": round(elapsed, 1),
        "rounds": rounds,
        "env_steps_per_s": round(rounds * envs * (len(sessions) + 1) / elapsed, 1) if elapsed else 0.0,
        "round_ms": _percentiles(latencies),
        "sessions": {
            "open": len(sessions) + 1,
            "opened": opened,
            "closed": closed,
            "open_s": _percentiles(open_seconds),
        },
        "reference": {"env": "CartPole-v1", "steps": reference_steps, "equal_to_sync_vector_env": not errors},
        "idle_start": idle_start,
        "samples": samples,
        "summary": summary,
        "flat": flat,
        "left_behind": left_behind,
        "errors": errors,
    }
    report["ok"] = not errors and all(flat.values()) and left_behind["ok"]
    return report


def _banner_limits(log: str) -> list:
    """The banner's limits lines (from "  limits" to what agents may run)."""
    lines = log.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith("  limits")), len(lines))
    end = next((i for i, line in enumerate(lines) if line.startswith("  agents may run")), len(lines))
    return [line.strip() for line in lines[start:end]]


def _percentiles(values: list) -> dict:
    if not values:
        return {}
    array = np.asarray(values) * 1000
    return {"p50": round(float(np.percentile(array, 50)), 2), "p99": round(float(np.percentile(array, 99)), 2)}


def _left_behind(host: HostProcess, pid: int, seen: dict, idle_start: dict) -> dict:
    """After every session closed: the host's env servers gone, its descriptors back at their idle
    level; after the host stopped: none of its env servers alive, nothing for ``gc`` to collect."""
    eventually(lambda: not descendants(pid), 20)
    servers_after_close = sorted(descendants(pid))
    eventually(lambda: fd_count(pid) <= idle_start["fds"] + 4, 10)
    idle_end = {"fds": fd_count(pid), "threads": thread_count(pid), "rss": rss_bytes(pid)}
    host.stop()
    servers_after_stop = sorted(p for p, started in seen.items() if alive(p) and start_time(p) == started)
    gc = subprocess.run(
        [sys.executable, "-m", "portal_shm", "gc", "--dry-run"], capture_output=True, text=True, timeout=120
    )
    gc_text = (gc.stdout + gc.stderr).strip()
    out = {
        "env_servers_seen": len(seen),
        "env_servers_after_close": servers_after_close,
        "env_servers_after_stop": servers_after_stop,
        "idle_end": idle_end,
        "fds_back": idle_end["fds"] <= idle_start["fds"] + 4,
        "host_exit": host.process.returncode,
        "gc_dry_run": gc_text,
        "gc_nothing_to_collect": "nothing to collect" in gc_text,
    }
    out["ok"] = (
        not servers_after_close
        and not servers_after_stop
        and out["fds_back"]
        and out["host_exit"] == 0
        and out["gc_nothing_to_collect"]
    )
    return out


def main(argv: Optional[list] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=10.0, help="how long the sessions step (default 10)")
    parser.add_argument("--agents", type=int, default=10, help="agent keys (default 10)")
    parser.add_argument("--sessions-per-agent", type=int, default=5, help="sessions of each key (default 5)")
    parser.add_argument("--envs", type=int, default=1, help="envs of each session (default 1)")
    parser.add_argument("--interval", type=float, default=5.0, help="seconds between samples (default 5)")
    parser.add_argument("--churn-every", type=float, default=2.0, help="seconds between a close and reopen (2)")
    parser.add_argument("--json", help="default: benchmarks/results/host_load_<minutes>min.json")
    args = parser.parse_args(argv)
    report = run_load(args.minutes, args.agents, args.sessions_per_agent, args.envs, args.interval, args.churn_every)
    report["command"] = ["python", "benchmarks/host_load.py", *(argv if argv is not None else sys.argv[1:])]
    path = args.json or os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "results", f"host_load_{args.minutes:g}min.json"
    )
    with open(path, "w") as handle:
        json.dump(report, handle, indent=1)
    for key in SERIES:
        entry = report["summary"][key]
        print(
            f"{key:8} start {entry.get('start')}, end {entry.get('end')}, max {entry.get('max')}, "
            f"steady {entry.get('steady')}, late {entry.get('late')}: {'flat' if entry.get('flat') else 'NOT flat'}"
        )
    left = report["left_behind"]
    print(
        f"{report['rounds']} rounds of {report['sessions']['open']} sessions ({report['env_steps_per_s']:,.0f} env "
        f"steps/s, round p99 {report['round_ms'].get('p99')} ms), {report['sessions']['opened']} opened, "
        f"{report['sessions']['closed']} closed; left behind: {'nothing' if left['ok'] else left}; "
        f"errors: {report['errors'] or 'none'}; written to {path}"
    )
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
