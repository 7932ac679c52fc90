"""Env hosts for the remote tests: real ``portal-shm host`` processes on 127.0.0.1, with keys."""

from __future__ import annotations

import os

from portal_shm.remote.keys import create_key_pair
from portal_shm.remote.spawn import HostProcess, LocalKeys

__all__ = ["HostProcess", "Keys"]


class Keys(LocalKeys):
    """The agent key pair the host accepts, and a stranger's it does not."""

    def __init__(self, root: str) -> None:
        super().__init__(root)
        _, self.stranger = create_key_pair(os.path.join(root, "agent"), "stranger")
