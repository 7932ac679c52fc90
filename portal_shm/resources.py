"""Names and files one portal owns, and their removal.

Every name starts with ``psm-<agent pid>-<token>`` so that ``portal-shm gc`` can tell whose a
leftover is. The run directory (mode 0700) holds the control sockets, server logs and the agent's
lock file: the agent keeps an exclusive POSIX record lock on it while alive, which is how env
servers (even in containers with their own pid namespace) notice that their agent is gone.
Record locks, unlike flock, are not inherited by forked children, so a worker forked from the
agent cannot keep a dead agent's portal alive.
"""

from __future__ import annotations

import fcntl
import itertools
import os
import secrets
import shutil
import tempfile
from typing import Optional

from .ring import unlink_semaphore, unlink_shm

PREFIX = "psm"
RUN_DIR_ENV_VAR = "PORTAL_SHM_RUN_DIR"
SHM_DIR = "/dev/shm"
_COUNTER = itertools.count()


def run_base_dir() -> str:
    return os.environ.get(RUN_DIR_ENV_VAR) or tempfile.gettempdir()


class PortalResources:
    """The run directory, lock and shared-memory names of one portal."""

    def __init__(self, base_dir: Optional[str] = None) -> None:
        # pid + a per-process counter make names unique among live portals; the random part keeps
        # a name from being guessed or reused by a later process that gets the same pid.
        self.tag = f"{PREFIX}-{os.getpid()}-{next(_COUNTER) % 256:02x}{secrets.token_hex(4)}"
        self.run_dir = os.path.join(base_dir or run_base_dir(), self.tag)
        self.ipc_dir: Optional[str] = None
        os.makedirs(self.run_dir, mode=0o700)
        os.chmod(self.run_dir, 0o700)
        self.lock_path = os.path.join(self.run_dir, "agent.lock")
        self._lock_fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        fcntl.lockf(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        self.shm_name = "/" + self.tag
        self.semaphores: list[str] = []
        self.owner: Optional[tuple] = None

    def hand_over(self, owner: Optional[tuple], *paths: str) -> None:
        """Give ``paths`` (default: the run directory and lock file) to the servers' user.

        Only when servers run as another user than the agent (an agent running as root, its
        containers as nobody); modes stay 0600/0700, so it is that user and root, nobody else.
        """
        if owner is None:
            return
        self.owner = owner
        for path in paths or (self.run_dir, self.lock_path):
            os.chown(path, *owner)

    def socket_address(self, server_index: int, generation: int = 0) -> str:
        suffix = f".{generation}" if generation else ""
        return f"ipc://{self.run_dir}/s{server_index}{suffix}.ctl"

    def make_ipc_dir(self) -> str:
        """A 0700 directory on /dev/shm that will hold only this portal's ring and semaphores.

        Containers get it as their /dev/shm instead of the host's IPC namespace: they can open
        their portal's segment and semaphores by the usual names and see nothing else.
        """
        if self.ipc_dir is None:
            path = os.path.join(SHM_DIR, self.tag + ".d")
            os.mkdir(path, 0o700)
            os.chmod(path, 0o700)
            self.ipc_dir = path
            self.hand_over(self.owner, path)
        return self.ipc_dir

    def publish_ipc(self, host_names_needed: bool) -> None:
        """Hard-link the ring and semaphores into the IPC directory (same tmpfs, same inodes).

        When no server opens them through the host's /dev/shm, the host names go at once: the
        agent keeps its mappings, and after a crash only the directory is left for ``gc``.
        """
        if self.ipc_dir is None:
            if self.owner is not None:
                self.hand_over(self.owner, os.path.join(SHM_DIR, self.shm_name[1:]),
                               *(os.path.join(SHM_DIR, "sem." + name[1:]) for name in self.semaphores))
            return
        files = [self.shm_name[1:]] + ["sem." + name[1:] for name in self.semaphores]
        self.hand_over(self.owner, *(os.path.join(SHM_DIR, name) for name in files))
        for name in files:
            target = os.path.join(self.ipc_dir, name)
            if not os.path.exists(target):
                os.link(os.path.join(SHM_DIR, name), target)
        if not host_names_needed:
            unlink_shm(self.shm_name)
            for name in self.semaphores:
                unlink_semaphore(name)

    def log_path(self, server_index: int) -> str:
        return os.path.join(self.run_dir, f"server-{server_index}.log")

    def semaphore_name(self, server_index: int, role: str) -> str:
        name = f"/{self.tag}-{server_index}{role}"
        self.semaphores.append(name)
        return name

    def release(self) -> None:
        """Unlink the segment and semaphores and delete the run directory; safe to repeat."""
        unlink_shm(self.shm_name)
        for name in self.semaphores:
            unlink_semaphore(name)
        shutil.rmtree(self.run_dir, ignore_errors=True)
        if self.ipc_dir is not None:
            shutil.rmtree(self.ipc_dir, ignore_errors=True)
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None
