"""What a chaos soak may leave behind, checked after everything closed: nothing at all.

Only what this run owns is judged (the machine is shared: other agents' portals may be live):
the env server and host processes it saw, containers, run directories and /dev/shm entries named
after its own pid or its hosts' pids, and what ``portal-shm gc --dry-run`` would collect of them.
"""

from __future__ import annotations

import glob
import os
import time
from typing import Optional

from portal_shm.runtimes.gc import collect
from portal_shm.runtimes.resources import PREFIX, run_base_dir


def _stat(pid: int) -> Optional[list]:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rpartition(")")[2].split()
    except OSError:
        return None


def start_time(pid: int) -> Optional[int]:
    """When the process started (clock ticks since boot): with its pid, who it is. Over a long run
    pids wrap round, and a pid seen early may belong to another process at the end."""
    fields = _stat(pid)
    return int(fields[19]) if fields else None


def _alive(pid: int, started: Optional[int] = None) -> bool:
    """A process that runs (a zombie waiting for its parent's reap is gone in all but name), and,
    with ``started``, is still the one that started then."""
    fields = _stat(pid)
    if fields is None or fields[0] == "Z":
        return False
    return started is None or int(fields[19]) == started


def _containers(owners: set) -> list:
    try:
        from portal_shm.runtimes.containers import list_containers
        from portal_shm.runtimes.docker import DockerUnavailableError

        try:
            return [f"{c.name} ({c.image})" for c in list_containers() if c.owner_pid in owners]
        except DockerUnavailableError:
            return []
    except ImportError:
        return []


def leftovers(owners: set, server_pids: set) -> dict:
    """Per kind, what of this run still exists; empty lists when nothing does. ``server_pids``:
    (pid, start time) of every server seen."""
    names = [f"{PREFIX}-{pid}-" for pid in owners]
    shm = sorted(e for e in os.listdir("/dev/shm") if e.startswith(tuple(names))) if os.path.isdir("/dev/shm") else []
    gc = [item for item in collect(dry_run=True) if item.owner_pid in owners]
    return {
        "processes": sorted(
            {pid for pid, started in server_pids if _alive(pid, started)}
            | {pid for pid in owners - {os.getpid()} if _alive(pid)}
        ),
        "containers": _containers(owners),
        "run_dirs": sorted(p for name in names for p in glob.glob(os.path.join(run_base_dir(), name + "*"))),
        "dev_shm": shm,
        "gc_dry_run": [f"{item.kind} {item.name}" for item in gc],
    }


def wait_for_nothing_left(owners: set, server_pids: set, seconds: float) -> dict:
    """Leftovers once they are all gone, or what is still there after ``seconds`` (servers of a
    killed host notice its death within about a second and clean up after it)."""
    deadline = time.monotonic() + seconds
    while True:
        found = leftovers(owners, server_pids)
        if not any(found.values()) or time.monotonic() > deadline:
            return found
        time.sleep(0.5)
