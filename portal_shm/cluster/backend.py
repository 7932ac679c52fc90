"""``backend="ray"``: env hosts placed as Ray actors on the nodes of a Ray cluster.

Ray is good at placing processes on nodes and at knowing which are alive, and slow as a per-step
data path (a synchronous actor call costs about a millisecond). So Ray only places, supervises and
replaces ``portal-shm host``s; each step crosses agent and host over the remote protocol
(``portal_shm.remote``), one message per host per (sub)batch, as for hosts started by hand.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Optional, Sequence

from ..errors import PortalError
from ..remote.client.backend import LinkOptions
from ..remote.host.policy import HostPolicy

STRATEGIES = ("STRICT_SPREAD", "SPREAD", "PACK", "STRICT_PACK")


@dataclass
class RayBackend(LinkOptions):
    """Where the env hosts go on the Ray cluster, and how the agent talks to them.

    Args:
        address: the cluster to join when this process is not connected to one yet (what
            ``ray.init(address=...)`` takes: ``"auto"``, ``"HEAD:6379"``, ``"ray://..."``). Default:
            the cluster ``ray.init()`` finds (``$RAY_ADDRESS``, one started on this machine), else a
            local one-node Ray that the portal shuts down at ``close()``.
        num_hosts: env hosts to place (default: ``hosts_per_node`` on each alive node that has
            ``cpus_per_host`` CPUs; a head started with ``--num-cpus=0`` gets none).
        hosts_per_node: hosts per node when ``num_hosts`` is not given.
        cpus_per_host: CPUs each host's placement group bundle reserves (its envs' share).
        strategy: the placement group strategy (default ``STRICT_SPREAD``, one host per node, when
            there are no more hosts than nodes, else ``SPREAD``).
        counts: envs per host, in order (default: spread evenly).
        runtime: the runtime of the envs on the nodes (``"process"``, ``"docker"`` with ``image``,
            ``"venv"``, ``"micromamba"``), with ``runtime_options``, as for ``backend="remote"``.
        compression: as ``RemoteBackend``'s.
        heartbeat_interval: as ``RemoteBackend``'s.
        heartbeat_timeout: as ``RemoteBackend``'s.
        connect_timeout: as ``RemoteBackend``'s.
        placement_timeout: seconds to wait for Ray to place the hosts (start and replacement).
        host_policy: what the hosts let this portal run (a ``HostPolicy``; default: the defaults of
            ``portal-shm host``: registered ids and the presets). The driver places the hosts, so
            it is their operator: widen it (``HostPolicy(entry_points=("mypkg.envs:*",))``) for
            envs the defaults refuse. Its ``runtimes`` are always ``runtime`` alone.
    """

    address: Optional[str] = None
    num_hosts: Optional[int] = None
    hosts_per_node: int = 1
    cpus_per_host: float = 1.0
    strategy: Optional[str] = None
    counts: Optional[Sequence[int]] = None
    placement_timeout: float = 60.0
    host_policy: Optional[HostPolicy] = None

    name = "ray"

    def policy(self) -> HostPolicy:
        """The hosts' policy: ``host_policy`` (or the defaults), offering ``runtime`` alone."""
        return dataclasses.replace(self.host_policy or HostPolicy(), runtimes=(self.runtime,))

    def check(self) -> None:
        self.check_link()
        if self.num_hosts is not None and (not isinstance(self.num_hosts, int) or self.num_hosts < 1):
            raise PortalError(f"num_hosts={self.num_hosts!r}: give a positive integer (or leave it out: one per node)")
        if not isinstance(self.hosts_per_node, int) or self.hosts_per_node < 1:
            raise PortalError(f"hosts_per_node={self.hosts_per_node!r}: give a positive integer")
        if not self.cpus_per_host or self.cpus_per_host < 0:
            raise PortalError(f"cpus_per_host={self.cpus_per_host!r}: give a positive number of CPUs")
        if self.strategy is not None and self.strategy not in STRATEGIES:
            raise PortalError(f"strategy={self.strategy!r}: one of {', '.join(STRATEGIES)}")
        if self.host_policy is not None and not isinstance(self.host_policy, HostPolicy):
            raise PortalError(
                f"host_policy must be a portal_shm.backends.HostPolicy, got {type(self.host_policy).__name__}"
            )
        if self.placement_timeout <= 0:
            raise PortalError("placement_timeout must be positive (seconds)")

    def placement(self, nodes: int) -> tuple[int, str]:
        """(hosts, placement strategy) on a cluster of ``nodes`` alive nodes that can take a host."""
        hosts = self.num_hosts or nodes * self.hosts_per_node
        strategy = self.strategy or ("STRICT_SPREAD" if hosts <= nodes else "SPREAD")
        if strategy == "STRICT_SPREAD" and hosts > nodes:
            raise PortalError(
                f"{hosts} env hosts cannot go on distinct nodes: the cluster has {nodes} alive with "
                f"{self.cpus_per_host:g} CPUs or more; give num_hosts <= nodes or strategy='SPREAD'"
            )
        return hosts, strategy


def option_names() -> set[str]:
    return {f.name for f in dataclasses.fields(RayBackend)}
