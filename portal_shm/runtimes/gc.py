"""Reclaiming what dead agents left behind: run directories, containers, and the named /dev/shm
segments, semaphores and IPC directories that portal-shm versions before the sealed memfd ring
created (a ring now has no name, so a crash leaves nothing in /dev/shm).

A leftover is only touched when its owner is provably gone: no process with the owner's pid
exists and, while its run directory is there, that directory's lock file is free (the agent held
an exclusive record lock on it for its whole life). Both are required: the lock alone would not
cover the instant between creating a run directory and locking it, the pid alone a reused pid. A live portal is never touched,
and neither is anything of the calling process itself: closing any descriptor of a lock file
drops the caller's own record locks, so gc never opens its own portals' lock files.
A run directory an agent made in a container (its ``owner-container`` marker names it) is judged
by its lock alone, since that agent's pid is another pid namespace's, unless gc runs in that same
container; gc also looks in the shared directories ``portal-shm agent`` makes (``agents_dir``).
"""

from __future__ import annotations

import fcntl
import os
import re
import shutil
from dataclasses import dataclass
from typing import Optional

from .agent_container import MARKER, own_container_id
from .resources import PREFIX, pid_alive, run_base_dir

SHM_DIR = "/dev/shm"
_NAME = re.compile(rf"^(?P<sem>sem\.)?(?P<tag>{PREFIX}-(?P<pid>\d+)-[0-9a-f]+)(?P<rest>.*)$")


@dataclass
class Leftover:
    kind: str  # "segment", "semaphore", "ipc dir", "run dir" or "container"
    name: str
    owner_pid: int
    size: int


def _lock_free(run_dir: str) -> bool:
    try:
        fd = os.open(os.path.join(run_dir, "agent.lock"), os.O_RDONLY)
    except FileNotFoundError:
        return True
    except PermissionError:  # another user's portal: not ours to judge
        return False
    try:
        fcntl.lockf(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def _owner_container(run_dir: str) -> Optional[str]:
    try:
        with open(os.path.join(run_dir, MARKER)) as file:
            return file.read().strip() or None
    except OSError:
        return None


def _owner_gone(tag: str, pid: int, base: Optional[str] = None) -> bool:
    run_dir = os.path.join(base or run_base_dir(), tag)
    container = _owner_container(run_dir)
    if (container is None or container == own_container_id()) and (pid == os.getpid() or pid_alive(pid)):
        return False
    return _lock_free(run_dir) if os.path.isdir(run_dir) else True


def run_dir_bases() -> list:
    """Where run directories live: ``run_base_dir()`` and each shared directory of ``portal-shm agent``."""
    from .agent_run import agents_dir

    bases = [run_base_dir()]
    try:
        bases += sorted(entry.path for entry in os.scandir(agents_dir()) if entry.is_dir(follow_symlinks=False))
    except OSError:
        pass
    return list(dict.fromkeys(os.path.realpath(base) for base in bases))


def find_leftovers() -> list[Leftover]:
    """Everything named like a portal's resource whose owning agent is gone."""
    found = []
    if os.path.isdir(SHM_DIR):
        for entry in sorted(os.listdir(SHM_DIR)):
            match = _NAME.match(entry)
            if match and _owner_gone(match["tag"], int(match["pid"])):
                path = os.path.join(SHM_DIR, entry)
                try:
                    size = os.stat(path).st_size
                except OSError:
                    continue
                kind = "semaphore" if match["sem"] else "ipc dir" if os.path.isdir(path) else "segment"
                found.append(Leftover(kind, entry, int(match["pid"]), size))
    for base in run_dir_bases():
        try:
            entries = sorted(os.listdir(base))
        except OSError:  # missing, or another user's
            continue
        for entry in entries:
            match = _NAME.match(entry)
            path = os.path.join(base, entry)
            if match and not match["rest"] and os.path.isdir(path) and _owner_gone(entry, int(match["pid"]), base):
                found.append(Leftover("run dir", path, int(match["pid"]), 0))
    return found


def remove(leftover: Leftover) -> None:
    if leftover.kind in ("segment", "semaphore"):
        try:
            os.unlink(os.path.join(SHM_DIR, leftover.name))
        except FileNotFoundError:
            pass
    elif leftover.kind == "ipc dir":
        shutil.rmtree(os.path.join(SHM_DIR, leftover.name), ignore_errors=True)
    else:
        shutil.rmtree(leftover.name, ignore_errors=True)


def _orphaned_containers() -> tuple:
    """Env-server containers of dead agents and ``portal-shm agent`` directories whose container is
    gone, when Docker is there at all."""
    try:
        from .agent_run import orphaned_agent_dirs
        from .containers import orphaned_containers
        from .docker import DockerUnavailableError, docker_client

        containers = orphaned_containers()
        return containers, [Leftover("agent dir", path, 0, 0) for path in orphaned_agent_dirs(docker_client())]
    except (ImportError, DockerUnavailableError):
        return [], []


def collect(dry_run: bool = False) -> list[Leftover]:
    """Find and (unless ``dry_run``) remove every leftover of dead portals; returns what was found."""
    containers, agent_dirs = _orphaned_containers()
    leftovers = find_leftovers() + agent_dirs
    if not dry_run:
        for leftover in leftovers:
            remove(leftover)
        for info in containers:
            info.container.remove(force=True)
    return leftovers + [Leftover("container", f"{info.name} ({info.image})", info.owner_pid, 0) for info in containers]
