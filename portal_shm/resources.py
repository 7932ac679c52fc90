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
import os
import secrets
import shutil
import tempfile
from typing import Optional

from .ring import unlink_semaphore, unlink_shm

PREFIX = "psm"
RUN_DIR_ENV_VAR = "PORTAL_SHM_RUN_DIR"


def run_base_dir() -> str:
    return os.environ.get(RUN_DIR_ENV_VAR) or tempfile.gettempdir()


class PortalResources:
    """The run directory, lock and shared-memory names of one portal."""

    def __init__(self, base_dir: Optional[str] = None) -> None:
        self.tag = f"{PREFIX}-{os.getpid()}-{secrets.token_hex(4)}"
        self.run_dir = os.path.join(base_dir or run_base_dir(), self.tag)
        os.makedirs(self.run_dir, mode=0o700)
        os.chmod(self.run_dir, 0o700)
        self.lock_path = os.path.join(self.run_dir, "agent.lock")
        self._lock_fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        fcntl.lockf(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        self.shm_name = "/" + self.tag
        self.semaphores: list[str] = []

    def socket_address(self, server_index: int) -> str:
        return f"ipc://{self.run_dir}/s{server_index}.ctl"

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
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None
