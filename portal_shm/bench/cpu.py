"""CPU seconds a system spends: the agent process and every process working for it, together.

Steps per second alone hide what they cost: a transport that spins, or a pool of threads, may buy
speed with cores. The bench therefore reports CPU seconds per 1,000 env steps beside the rate.
A system's processes are this process (all its threads, to the nanosecond) and, read from
/proc in clock ticks, every process under it and under its env servers' host processes (the
docker backend's containers are not children of the agent). Processes of the other systems of a
cell sleep while one system runs: they cost nothing, so they are not told apart. Linux only;
elsewhere the figure is the agent process alone.
"""

from __future__ import annotations

import os
import time
from typing import Any, Iterable, Optional

_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _stat_fields(pid: int) -> Optional[list]:
    """Fields of /proc/PID/stat after the command name (which may hold spaces), or None."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    return data[data.rfind(b")") + 2 :].split()


def process_ticks(pid: int) -> Optional[int]:
    """User plus system CPU time of a process (all its threads) in clock ticks; None once it is gone."""
    fields = _stat_fields(pid)
    return int(fields[11]) + int(fields[12]) if fields else None


def process_cpu(pid: int) -> float:
    """User plus system CPU seconds of a process (all its threads); 0 once it is gone."""
    return (process_ticks(pid) or 0) / _TICK


def descendants(roots: Iterable[int]) -> set:
    """Every live process under ``roots`` (not the roots themselves)."""
    children: dict = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return set()
    for entry in entries:
        if entry.isdigit():
            fields = _stat_fields(int(entry))
            if fields:
                children.setdefault(int(fields[1]), []).append(int(entry))
    found: set = set()
    stack = list(roots)
    while stack:
        for child in children.get(stack.pop(), ()):
            if child not in found:
                found.add(child)
                stack.append(child)
    return found


def server_pids(envs: Any) -> list:
    """Host process ids of a VectorPortal's env servers (``servers[i]["pid"]``); [] for others."""
    try:
        servers = envs.servers
    except Exception:
        return []
    return [s["pid"] for s in servers if isinstance(s, dict) and isinstance(s.get("pid"), int)]


class CpuMeter:
    """``read()``: CPU seconds so far of this process plus the processes working for ``envs``."""

    def __init__(self, envs: Any = None) -> None:
        own = os.getpid()
        servers = set(server_pids(envs)) if envs is not None else set()
        self.pids = sorted((descendants([own, *servers]) | servers) - {own})

    def read(self) -> float:
        return time.process_time() + sum(process_cpu(pid) for pid in self.pids)
