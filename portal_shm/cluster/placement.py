"""Env hosts on a Ray cluster: placed in one placement group, replaced when lost, removed at close.

The placement group reserves each host's CPUs on its node (``STRICT_SPREAD``: one host per node)
before any env starts, so a cluster too small fails at once with what it lacks. A host lost with
its node is replaced on the live node with the fewest of the portal's hosts.
"""

from __future__ import annotations

import time
from typing import Any, Optional

import zmq

from ..errors import PortalError
from ..remote.client import reach
from ..remote.client.backend import split_envs
from .actor import EnvHostActor
from .backend import RayBackend


def _ray() -> Any:
    try:
        import ray
    except ImportError:
        raise PortalError(
            "backend='ray' needs Ray on the agent and on every node: pip install 'portal-shm[ray]'"
        ) from None
    return ray


def connect(address: Optional[str]) -> bool:
    """Join ``address`` (or the cluster ``ray.init`` finds) unless connected; True if this call connected."""
    ray = _ray()
    if ray.is_initialized():
        return False
    if address and address not in ("auto", "local"):  # ray.init would retry a dead address for a minute
        try:
            problem = reach.unreachable(address)
        except PortalError:  # not HOST:PORT: ray.init says what it makes of it
            problem = None
        if problem:
            fix = (
                "check the name in address=, or give the head node's IP address"
                if problem.unresolved
                else "is `ray start --head` running there (a ray:// address needs its client server, port 10001 "
                "by default), and is the port open to this machine?"
            )
            raise PortalError(f"cannot join the Ray cluster at {address}: {problem}; {fix}")
    try:
        ray.init(address=address, log_to_driver=False, include_dashboard=False)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise PortalError(
            f"cannot join the Ray cluster at {address or 'the default address'}: {exc}; start one with "
            "`ray start --head` (and `ray start --address=HEAD:6379` on the other nodes), or pass address="
        ) from None
    return True


class RayHosts:
    """The env hosts of one portal: their actors, endpoints and placement group; a remote portal's
    ``Placement`` (``remote/client/placement.py``), with a fresh key pair of the agent's per portal
    (only its public half goes through Ray)."""

    def __init__(self, backend: RayBackend, num_envs: int) -> None:
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        self.backend = backend
        self._client_public, self._client_secret = zmq.curve_keypair()
        self._owns_ray = connect(backend.address)
        self.actors: list[Any] = []
        self.endpoints: list[dict[str, Any]] = []
        self.group: Any = None
        try:
            hosts = self._reserve(num_envs)
            self.actors = [
                self._start(i, backend.cpus_per_host, PlacementGroupSchedulingStrategy(self.group, i))  # type: ignore[arg-type]
                for i in range(hosts)
            ]
            self.endpoints = [self._endpoint(actor, i) for i, actor in enumerate(self.actors)]
        except BaseException:
            self.close()
            raise

    def _reserve(self, num_envs: int) -> int:
        """The placement group of the hosts, ready (their CPUs reserved); returns how many hosts."""
        ray = _ray()
        from ray.util.placement_group import placement_group, remove_placement_group

        b = self.backend
        nodes = [n for n in ray.nodes() if n.get("Alive") and n.get("Resources", {}).get("CPU", 0) >= b.cpus_per_host]
        hosts, strategy = b.placement(len(nodes))
        self.counts = split_envs(num_envs, hosts, b.counts)
        total = ray.cluster_resources().get("CPU", 0)
        where = f"the Ray cluster has {total:g} CPUs on {len(nodes)} alive nodes with {b.cpus_per_host:g} or more"
        if hosts * b.cpus_per_host > total:
            raise PortalError(
                f"{hosts} env hosts of {b.cpus_per_host:g} CPU each need {hosts * b.cpus_per_host:g} CPUs; {where}: "
                "lower num_hosts or cpus_per_host, or add nodes"
            )
        self.group = placement_group([{"CPU": float(b.cpus_per_host)} for _ in range(hosts)], strategy=strategy)
        try:
            ray.get(self.group.ready(), timeout=b.placement_timeout)
        except ray.exceptions.GetTimeoutError:
            remove_placement_group(self.group)
            self.group = None
            free = ray.available_resources().get("CPU", 0)
            raise PortalError(
                f"Ray could not place {hosts} env hosts of {b.cpus_per_host:g} CPU each ({strategy}) within "
                f"{b.placement_timeout:g} s: {where}, {free:g} free; lower num_hosts or cpus_per_host, or add nodes"
            ) from None
        return hosts

    # -- the remote portal's Placement ----------------------------------------------------------
    def addresses(self) -> list[str]:
        return [e["address"] for e in self.endpoints]

    def env_counts(self, num_envs: int) -> list[int]:
        return list(self.counts)

    def curve(self, index: int) -> Optional[tuple[bytes, bytes, bytes]]:
        """This portal's key pair, and host ``index``'s key as its actor reported it."""
        return self._client_public, self._client_secret, self.endpoints[index]["public_key"].encode("ascii")

    def address_after_loss(self, index: int, address: str, deadline: float) -> str:
        """Host ``index`` went silent: reconnect if its actor lives (a cut link), else place a new one."""
        if self.alive(index):
            return address
        return str(self.replace(index, deadline)["address"])

    def _start(self, index: int, num_cpus: float, strategy: Any) -> Any:
        """Host ``index``'s actor, scheduled by ``strategy``."""
        ray = _ray()
        b = self.backend
        return (
            ray.remote(EnvHostActor)
            .options(num_cpus=num_cpus, max_restarts=0, scheduling_strategy=strategy)
            .remote(self._client_public, b.policy(), self.counts[index], b.heartbeat_timeout)
        )

    def _endpoint(self, actor: Any, index: int) -> dict[str, Any]:
        ray = _ray()
        try:
            endpoint: dict[str, Any] = ray.get(actor.endpoint.remote(), timeout=self.backend.placement_timeout)
            return endpoint
        except ray.exceptions.GetTimeoutError:
            raise PortalError(
                f"env host {index} did not start on its Ray node within placement_timeout="
                f"{self.backend.placement_timeout:g} s"
            ) from None
        except ray.exceptions.RayActorError as exc:
            raise PortalError(f"env host {index} failed to start on its Ray node: {exc}") from None

    def alive(self, index: int, timeout: float = 2.0) -> bool:
        """Whether host ``index``'s actor still answers Ray (a silent host may only be cut off)."""
        ray = _ray()
        try:
            return bool(ray.get(self.actors[index].ping.remote(), timeout=timeout))
        except Exception:
            return False

    def replace(self, index: int, deadline: float) -> dict[str, Any]:
        """A new host for host ``index``, whose actor is gone (with its node, most often): its endpoint.

        It goes to the live node with the fewest of this portal's hosts, never back to the lost
        one (which Ray may still count as alive for a while), and reserves no CPUs: the placement
        group may have no room left (one bundle per node), and the lost node's CPUs went with it.
        """
        ray = _ray()
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        try:
            ray.kill(self.actors[index], no_restart=True)
        except Exception:
            pass
        lost = self.endpoints[index]["node_id"]
        load = {node["NodeID"]: 0 for node in ray.nodes() if node.get("Alive") and node["NodeID"] != lost}
        if not load:
            raise PortalError(f"no live Ray node is left to place a new env host {index} on")
        for i, endpoint in enumerate(self.endpoints):
            if i != index and endpoint["node_id"] in load:
                load[endpoint["node_id"]] += 1
        node = min(load, key=lambda n: load[n])
        self.actors[index] = self._start(index, 0, NodeAffinitySchedulingStrategy(node, soft=False))
        try:
            endpoint = ray.get(self.actors[index].endpoint.remote(), timeout=max(1.0, deadline - time.monotonic()))
        except Exception as exc:
            raise PortalError(f"a new env host {index} did not start on Ray node {node[:8]}: {exc}") from None
        self.endpoints[index] = endpoint
        return dict(endpoint)

    def close(self) -> None:
        """Stop every host (their envs first), kill the actors, free the placement group."""
        ray = _ray()
        from ray.util.placement_group import remove_placement_group

        if self.actors:
            stops = [actor.stop.remote() for actor in self.actors]
            try:
                ray.wait(stops, num_returns=len(stops), timeout=30)
            except Exception:
                pass
            for actor in self.actors:
                try:
                    ray.kill(actor, no_restart=True)
                except Exception:
                    pass
            self.actors = []
        if self.group is not None:
            try:
                remove_placement_group(self.group)
            except Exception:
                pass
            self.group = None
        if self._owns_ray:
            self._owns_ray = False
            ray.shutdown()
