"""``RayVectorPortal``: a RemoteVectorPortal whose hosts Ray placed, and replaces when a node is lost.

Everything per step is the remote portal's: one message per host per (sub)batch over CURVE, never a
Ray call. What Ray adds is where the hosts are, a fresh key pair per portal (only public halves go
through Ray), and under ``on_env_failure="restart"`` a new host when one is lost with its node: the
lost envs restart there, their episodes ending truncated with ``info["env_restarted"]``.
"""

from __future__ import annotations

from typing import Any, Optional

import zmq

from ..remote.client.backend import RemoteBackend
from ..remote.client.vector import RemoteVectorPortal
from .backend import RayBackend
from .placement import RayHosts


class RayVectorPortal(RemoteVectorPortal):
    """``num_envs`` copies of ``env_id`` on env hosts that Ray placed over its cluster's nodes."""

    def __init__(
        self,
        env_id: str,
        num_envs: int,
        backend: RayBackend,
        env_kwargs: Optional[dict] = None,
        copy: bool = False,
        **vector_kwargs: Any,
    ) -> None:
        backend.check()
        self.ray_backend = backend
        self._client_keys = zmq.curve_keypair()
        self._cluster: Optional[RayHosts] = None
        self._cluster = RayHosts(backend, self._client_keys[0], num_envs)
        remote = RemoteBackend(
            hosts=self._cluster.addresses,
            counts=self._cluster.counts,
            runtime=backend.runtime,
            runtime_options=dict(backend.runtime_options),
            compression=backend.compression,
            host_key=[e["public_key"] for e in self._cluster.endpoints],
            heartbeat_interval=backend.heartbeat_interval,
            heartbeat_timeout=backend.heartbeat_timeout,
            connect_timeout=backend.connect_timeout,
        )
        try:
            super().__init__(env_id, num_envs, remote, env_kwargs, copy, **vector_kwargs)
        except BaseException:
            if self._cluster is not None:  # refused before the remote portal could close itself
                self._cluster.close()
                self._cluster = None
            raise

    def _curve(self, index: int) -> Optional[tuple]:
        """This portal's own key pair, and host ``index``'s key as its actor reported it."""
        public, secret = self._client_keys
        return public, secret, self._cluster.endpoints[index]["public_key"].encode("ascii")

    def _address_after_loss(self, index: int, address: str, deadline: float) -> str:
        """Host ``index`` went silent: reconnect if its actor lives (a cut link), else Ray places a new one."""
        if self._cluster.alive(index):
            return address
        return self._cluster.replace(index, deadline)["address"]

    def host_nodes(self) -> list[str]:
        """The Ray node id of each env host, in env order."""
        return [e["node_id"] for e in self._cluster.endpoints]

    def host_endpoints(self) -> list[dict]:
        """Each env host as its actor reported it, in env order: ``address``, ``public_key``,
        ``node_id``, ``pid`` (the actor's process, parent of its env servers), ``run_dir``."""
        return [dict(e) for e in self._cluster.endpoints]

    def close_extras(self, **kwargs: Any) -> None:
        try:
            super().close_extras(**kwargs)
        finally:
            if self._cluster is not None:
                self._cluster.close()
                self._cluster = None
