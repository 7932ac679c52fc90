"""The shared-memory segment that carries observations, actions, rewards, flags and mailboxes.

The agent creates it as a sealed memfd: an anonymous file that can neither shrink nor grow, so a
server that holds it (and may be hostile) cannot truncate it under the agent's mapping, which
would kill the agent with SIGBUS on its next access. It has no name: nothing of it can be left
in /dev/shm after a crash, and the kernel frees it when the last process holding it exits.
Servers get its descriptor over a unix socket (``handoff``) and write their rows in place.
"""

from __future__ import annotations

import fcntl
import mmap
import os
from typing import Any, Optional

import numpy as np

from .layout import field_views

_SEALS = fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL


def create_segment(name: str, size: int) -> int:
    """A new sealed memfd of ``size`` bytes (zero-filled); returns its descriptor."""
    fd = os.memfd_create(name, os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    try:
        os.ftruncate(fd, size)
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, _SEALS)
    except BaseException:
        os.close(fd)
        raise
    return fd


class Ring:
    """One mapped segment plus numpy views of every field of its layout.

    ``fd`` is the segment's descriptor: the agent keeps it open (to hand it to restarted servers),
    a server closes it once mapped.
    """

    def __init__(self, layout: dict[str, Any], fd: int) -> None:
        self.layout = layout
        self.fd: Optional[int] = fd
        size = int(layout["size"])
        held = os.fstat(fd).st_size
        if held < size:
            raise ValueError(f"the shared segment holds {held} bytes, the layout needs {size}")
        self._mmap: Optional[mmap.mmap] = mmap.mmap(fd, size)
        self.views: dict[str, np.ndarray] = field_views(layout, self._mmap)

    @classmethod
    def create(cls, name: str, layout: dict[str, Any]) -> "Ring":
        fd = create_segment(name, int(layout["size"]))
        try:
            return cls(layout, fd)
        except BaseException:
            os.close(fd)
            raise

    def close_fd(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def close(self) -> None:
        """Drop our references; the mapping is unmapped once the last view of it is gone.

        Never ``mmap.close()`` here: numpy views do not pin the mapping, and a batch the caller
        still holds would then point at unmapped memory (a segfault instead of stale data).
        """
        self.close_fd()
        self.views = {}
        self._mmap = None
