"""``RayVectorPortal``: a RemoteVectorPortal whose hosts Ray placed, and replaces when a node is lost.

Everything per step is the remote portal's: one message per host per (sub)batch over CURVE, never a
Ray call. What Ray adds is its placement (``placement.RayHosts``): where the hosts are, a fresh key
pair per portal (only public halves go through Ray), and under ``on_env_failure="restart"`` a new
host when one is lost with its node: the lost envs restart there, their episodes ending truncated
with ``info["env_restarted"]``.
"""

from __future__ import annotations

from typing import Any, Optional

from gymnasium.vector import VectorEnv

from ..remote.client.vector import RemoteVectorPortal
from .backend import RayBackend
from .placement import RayHosts


# ``VectorEnv`` among the direct bases, as ``VectorPortal``'s (skrl's ``wrap_env`` looks there).
class RayVectorPortal(RemoteVectorPortal, VectorEnv):
    """``num_envs`` copies of ``env_id`` on env hosts that Ray placed over its cluster's nodes."""

    def __init__(
        self,
        env_id: str,
        num_envs: int,
        backend: RayBackend,
        env_kwargs: Optional[dict[str, Any]] = None,
        copy: bool = True,
        **vector_kwargs: Any,
    ) -> None:
        backend.check()
        self.ray_backend = backend
        self._checked_options(num_envs, vector_kwargs)  # refused before Ray places anything
        self._ray_hosts = RayHosts(backend, num_envs)
        super().__init__(env_id, num_envs, backend, env_kwargs, copy, placement=self._ray_hosts, **vector_kwargs)

    def host_nodes(self) -> list[str]:
        """The Ray node id of each env host, in env order."""
        return [str(e["node_id"]) for e in self._ray_hosts.endpoints]

    def host_endpoints(self) -> list[dict[str, Any]]:
        """Each env host as its actor reported it, in env order: ``address``, ``public_key``,
        ``node_id``, ``pid`` (the actor's process, parent of its env servers), ``run_dir``."""
        return [dict(e) for e in self._ray_hosts.endpoints]
