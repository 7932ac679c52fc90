"""Names and files one portal owns, and their removal.

Every name starts with ``psm-<agent pid>-<token>`` so that ``portal-shm gc`` can tell whose a
leftover is. The run directory (mode 0700) holds the control sockets, the socket servers fetch
the ring from, server logs and the agent's lock file: the agent keeps an exclusive POSIX record
lock on it while alive, which is how env servers (even in containers with their own pid
namespace) notice that their agent is gone.
Record locks, unlike flock, are not inherited by forked children, so a worker forked from the
agent cannot keep a dead agent's portal alive. Record locks hold across bind mounts of one
directory too, so an agent in a container and env servers in others see the same lock; such a
run directory names the agent's container in a marker file, since its pid means nothing outside.
"""

from __future__ import annotations

import fcntl
import itertools
import os
import secrets
import shutil
import tempfile
from typing import Optional

from .agent_container import MARKER, own_container_id

PREFIX = "psm"
RUN_DIR_ENV_VAR = "PORTAL_SHM_RUN_DIR"
_COUNTER = itertools.count()


def run_base_dir() -> str:
    return os.environ.get(RUN_DIR_ENV_VAR) or tempfile.gettempdir()


class PortalResources:
    """The run directory, lock and name of one portal (the ring itself has no name: see ``ring``)."""

    def __init__(self, base_dir: Optional[str] = None) -> None:
        # pid + a per-process counter make names unique among live portals; the random part keeps
        # a name from being guessed or reused by a later process that gets the same pid.
        self.tag = f"{PREFIX}-{os.getpid()}-{next(_COUNTER) % 256:02x}{secrets.token_hex(4)}"
        self.run_dir = os.path.join(base_dir or run_base_dir(), self.tag)
        os.makedirs(self.run_dir, mode=0o700)
        os.chmod(self.run_dir, 0o700)
        self.lock_path = os.path.join(self.run_dir, "agent.lock")
        self._lock_fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        fcntl.lockf(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        container = own_container_id()
        if container:
            with open(os.path.join(self.run_dir, MARKER), "w") as file:
                file.write(container)
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

    @property
    def segment_socket(self) -> str:
        """Where servers fetch the ring's descriptor (``handoff``)."""
        return os.path.join(self.run_dir, "ring.sock")

    def log_path(self, server_index: int) -> str:
        return os.path.join(self.run_dir, f"server-{server_index}.log")

    def remove_dir(self) -> None:
        """Delete the run directory but keep the lock: servers told to close hold its descriptor, so
        they still see their agent alive, and an agent killed while it waits for them leaves nothing."""
        shutil.rmtree(self.run_dir, ignore_errors=True)

    def release(self) -> None:
        """Delete the run directory and drop the lock; safe to repeat."""
        self.remove_dir()
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None


def pid_alive(pid: int) -> bool:
    """Whether a process ``pid`` exists (one of another user counts as alive)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
