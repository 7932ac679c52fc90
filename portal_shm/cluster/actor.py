"""The Ray actor that is one env host: a ``portal-shm host`` serving one portal, on its node.

The actor makes the host's key pair itself, on its node, and hands back only the public key; the
one key it is given is the agent's public key, the only client its host accepts. So nothing secret
crosses the network, through Ray or otherwise, and a host placed for one portal serves no other
agent. The secret half is deleted from disk as soon as the host's socket has it. The host binds
the node's address that Ray uses, on a free port.

Ray kills an actor's whole process tree at once (a dead driver, ``ray.kill``, a lost node), env
servers included, so nothing of the host gets to clean up after itself. Its files therefore live in
a run directory of the actor's own, locked for its life, that ``portal-shm gc`` reclaims once the
actor is gone; and each new host actor reclaims such leftovers of dead hosts on its node first.
"""

from __future__ import annotations

import os
import threading
from typing import Any, Optional

from ..remote import keys
from ..remote.host.daemon import Host, HostOptions
from ..remote.host.policy import HostPolicy
from ..runtimes import gc
from ..runtimes.resources import PortalResources


class EnvHostActor:
    """A host in a thread of the actor's process; its env servers are children of that process,
    so when Ray kills the actor (``close()``, a dead driver, a lost node) they exit with it."""

    def __init__(
        self,
        client_public: bytes,
        policy: HostPolicy,
        max_envs: int,
        heartbeat_timeout: float,
        bind_ip: Optional[str] = None,
    ) -> None:
        import ray

        context = ray.get_runtime_context()
        self.node_id = context.get_node_id()
        ip = bind_ip or ray.util.get_node_ip_address()  # type: ignore[no-untyped-call]
        self.reclaimed = len(gc.collect())
        self._resources = PortalResources()
        try:
            keys_dir = os.path.join(self._resources.run_dir, "host")
            clients = os.path.join(keys_dir, "clients")
            keys.write_public_key(clients, "agent", client_public)
            options = HostOptions(
                bind=f"tcp://{ip}:0",
                keys_dir=keys_dir,
                clients_dir=clients,
                max_envs=max_envs,
                max_envs_per_agent=max_envs,
                policy=policy,
                heartbeat_timeout=heartbeat_timeout,
                name=f"ray-node-{self.node_id[:8]}",
            )
            self._host = Host(options)
            os.remove(os.path.join(keys_dir, "host.key_secret"))
        except BaseException:
            self._resources.release()
            raise
        self._thread = threading.Thread(target=self._host.serve, name="portal-shm-host", daemon=True)
        self._thread.start()

    def endpoint(self) -> dict[str, Any]:
        """Where the agent connects, and the public key it pins."""
        return {
            "address": self._host.address,
            "public_key": self._host.public_key,
            "node_id": self.node_id,
            "pid": os.getpid(),
            "run_dir": self._resources.run_dir,
            "reclaimed": self.reclaimed,
        }

    def ping(self) -> bool:
        return self._thread.is_alive()

    def stop(self) -> None:
        """Stop the host (its sessions' envs first) and remove its keys."""
        self._host.stop()
        self._thread.join(60)
        self._resources.release()
