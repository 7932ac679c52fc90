"""Env hosts on this machine: real ``portal-shm host`` processes on 127.0.0.1, with keys; another
agent key a host accepts; a free port; an agent process that steps until it is killed."""

from __future__ import annotations

import os
import shutil
import socket
import textwrap
from typing import Any

from portal_shm.remote.host.spawn import HostProcess, LocalKeys
from portal_shm.remote.keys import create_key_pair

__all__ = ["AGENT", "EXAMPLE_ENVS", "HostProcess", "Keys", "add_agent_key", "free_port"]

# The flag an operator gives a host to serve the project's example envs (NullEnv, FaultyEnv, ...),
# which the default policy refuses as it refuses every entry point but the presets.
EXAMPLE_ENVS = ("--entry-points", "portal_shm.server.example_envs:*")


class Keys(LocalKeys):
    """The agent key pair the host accepts, and a stranger's it does not."""

    def __init__(self, root: str) -> None:
        super().__init__(root)
        _, self.stranger = create_key_pair(os.path.join(root, "agent"), "stranger")


def add_agent_key(keys: Any, name: str) -> str:
    """Another agent key pair, its public key copied into the host's clients directory (a host
    rereads that directory when it changes); returns the secret key's path, a ``client_key``."""
    public, secret = create_key_pair(os.path.join(keys.root, "agent"), name)
    shutil.copy(public, keys.clients_dir)
    return secret


def free_port() -> int:
    """A port of 127.0.0.1 free a moment ago (for a host restarted on the same address)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


# An agent process (``python -c AGENT ADDRESS HOST_KEY CLIENT_KEY``): two CartPoles on the host,
# "stepping" printed once reset, then steps until it is killed.
AGENT = textwrap.dedent("""
    import sys, numpy as np, portal_shm
    envs = portal_shm.make_vec("CartPole-v1", 2, backend="remote", hosts=[sys.argv[1]], host_key=sys.argv[2],
                               client_key=sys.argv[3], heartbeat_timeout=4.0)
    envs.reset(seed=0)
    print("stepping", flush=True)
    while True:
        envs.step(np.zeros(2, np.int64))
""")
