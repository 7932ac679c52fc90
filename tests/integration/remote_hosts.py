"""Env hosts for the remote tests: real ``portal-shm host`` processes on 127.0.0.1, with keys."""

from __future__ import annotations

import os

from portal_shm.remote.host.spawn import HostProcess, LocalKeys
from portal_shm.remote.keys import create_key_pair

__all__ = ["EXAMPLE_ENVS", "HostProcess", "Keys"]

# The flag an operator gives a host to serve the project's example envs (NullEnv, FaultyEnv, ...),
# which the default policy refuses as it refuses every entry point but the presets.
EXAMPLE_ENVS = ("--entry-points", "portal_shm.server.example_envs:*")


class Keys(LocalKeys):
    """The agent key pair the host accepts, and a stranger's it does not."""

    def __init__(self, root: str) -> None:
        super().__init__(root)
        _, self.stranger = create_key_pair(os.path.join(root, "agent"), "stranger")
