"""What ``/proc`` says about a process: its memory, descriptors, threads, children; whether it is gone."""

from __future__ import annotations

import os
import time
from typing import Any, Optional


def _status(pid: int, field: str) -> int:
    """A number of ``/proc/<pid>/status`` (``VmRSS``, ``VmHWM`` in bytes; ``Threads``); 0 once gone."""
    try:
        with open(f"/proc/{pid}/status") as handle:
            for line in handle:
                if line.startswith(field + ":"):
                    words = line.split()
                    return int(words[1]) * (1024 if words[-1] == "kB" else 1)
    except OSError:
        pass
    return 0


def rss_bytes(pid: int) -> int:
    return _status(pid, "VmRSS")


def peak_rss_bytes(pid: int) -> int:
    """The process's resident peak so far (``VmHWM``): what a short-lived allocation leaves as a trace."""
    return _status(pid, "VmHWM")


def thread_count(pid: int) -> int:
    return _status(pid, "Threads")


def fd_count(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return 0


def _parents() -> dict:
    """pid -> parent pid of every live (not zombie) process."""
    out = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as handle:
                fields = handle.read().rpartition(")")[2].split()
        except OSError:
            continue
        if fields[0] != "Z":
            out[int(name)] = int(fields[1])
    return out


def descendants(pid: int) -> set:
    """The live processes under ``pid`` (its env servers, for a host)."""
    parents = _parents()
    found, frontier = set(), {pid}
    while frontier:
        frontier = {child for child, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def alive(pid: int) -> bool:
    return pid in _parents()


def start_time(pid: int) -> Optional[int]:
    """When ``pid`` started (clock ticks since boot): with the pid, which process it is (pids wrap)."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return int(handle.read().rpartition(")")[2].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def eventually(check: Any, seconds: float, step: float = 0.05) -> bool:
    deadline = time.monotonic() + seconds
    while True:
        if check():
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(step)


def pid_gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as handle:  # a zombie counts as gone
            return handle.read().split(")")[-1].split()[0] == "Z"
    except FileNotFoundError:
        return True


ZYGOTE = "psm-zygote"  # the name a zygote gives itself (``portal_shm/server/zygote.py``)


def is_zygote(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/comm") as handle:
            return handle.read().strip() == ZYGOTE
    except OSError:
        return False


def server_children(pid: int) -> list:
    """The env servers ``pid`` (an env host, an agent) started: its children, a zygote's in its place."""
    found = []
    for child in children(pid):
        found += children(child) if is_zygote(child) else [child]
    return found


def server_parent(pid: int) -> int:
    """Who started env server ``pid``: its parent, or its zygote's."""
    above = parent(pid)
    return parent(above) if is_zygote(above) else above


def parent(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as handle:
        return int(handle.read().split(")")[-1].split()[1])


def children(pid: int) -> list:
    """The processes ``pid`` started (its threads' children too), from /proc."""
    found = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except FileNotFoundError:
        return found
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/children") as handle:
                found += [int(c) for c in handle.read().split()]
        except FileNotFoundError:
            pass
    return found


def wait_gone(pids: list, seconds: float) -> float:
    started = time.monotonic()
    while not all(pid_gone(p) for p in pids) and time.monotonic() - started < seconds:
        time.sleep(0.1)
    return time.monotonic() - started
