"""Env hosts on a Ray cluster: placed in one placement group, replaced when lost, removed at close.

The placement group reserves each host's CPUs on its node (``STRICT_SPREAD``: one host per node)
before any env starts, so a cluster too small fails at once with what it lacks. A host lost with
its node is replaced in its own bundle, which Ray moves to a node that is still alive.
"""

from __future__ import annotations

import time
from typing import Any, Optional

from ..errors import PortalError
from ..remote.backend import split_envs
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
    try:
        ray.init(address=address, log_to_driver=False, include_dashboard=False)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise PortalError(
            f"cannot join the Ray cluster at {address or 'the default address'}: {exc}; start one with "
            "`ray start --head` (and `ray start --address=HEAD:6379` on the other nodes), or pass address="
        ) from None
    return True


class RayHosts:
    """The env hosts of one portal: their actors, endpoints and placement group."""

    def __init__(self, backend: RayBackend, client_public: bytes, num_envs: int) -> None:
        ray = _ray()
        from ray.util.placement_group import placement_group, remove_placement_group

        self.backend = backend
        self._client_public = client_public
        self._owns_ray = connect(backend.address)
        self.actors: list = []
        self.endpoints: list[dict] = []
        self.group: Any = None
        try:
            nodes = [node for node in ray.nodes() if node.get("Alive")]
            hosts, strategy = backend.placement(len(nodes))
            self.counts = split_envs(num_envs, hosts, backend.counts)
            total = ray.cluster_resources().get("CPU", 0)
            if hosts * backend.cpus_per_host > total:
                raise PortalError(
                    f"{hosts} env hosts of {backend.cpus_per_host:g} CPU each need {hosts * backend.cpus_per_host:g} "
                    f"CPUs; the Ray cluster has {total:g} on {len(nodes)} alive nodes: lower num_hosts or "
                    "cpus_per_host, or add nodes"
                )
            bundle = {"CPU": float(backend.cpus_per_host)}
            self.group = placement_group([dict(bundle) for _ in range(hosts)], strategy=strategy)
            try:
                ray.get(self.group.ready(), timeout=backend.placement_timeout)
            except ray.exceptions.GetTimeoutError:
                remove_placement_group(self.group)
                self.group = None
                total = ray.cluster_resources().get("CPU", 0)
                free = ray.available_resources().get("CPU", 0)
                raise PortalError(
                    f"Ray could not place {hosts} env hosts of {backend.cpus_per_host:g} CPU each ({strategy}) within "
                    f"{backend.placement_timeout:g} s: the cluster has {len(nodes)} alive nodes, {free:g} of "
                    f"{total:g} CPUs free; lower num_hosts or cpus_per_host, or add nodes"
                ) from None
            self.actors = [self._start(i) for i in range(hosts)]
            self.endpoints = [self._endpoint(actor, i) for i, actor in enumerate(self.actors)]
        except BaseException:
            self.close()
            raise

    def __len__(self) -> int:
        return len(self.actors)

    @property
    def addresses(self) -> list[str]:
        return [e["address"] for e in self.endpoints]

    def _start(self, index: int) -> Any:
        ray = _ray()
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        b = self.backend
        return (
            ray.remote(EnvHostActor)
            .options(
                num_cpus=b.cpus_per_host,
                max_restarts=0,
                scheduling_strategy=PlacementGroupSchedulingStrategy(self.group, placement_group_bundle_index=index),
            )
            .remote(self._client_public, b.runtime, self.counts[index], b.heartbeat_timeout)
        )

    def _endpoint(self, actor: Any, index: int) -> dict:
        ray = _ray()
        try:
            return ray.get(actor.endpoint.remote(), timeout=self.backend.placement_timeout)
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

    def replace(self, index: int, deadline: float) -> dict:
        """A new host in bundle ``index`` (Ray moves a lost node's bundle to a live node): its endpoint.

        Until Ray has marked the node dead, the bundle may still point there and the new actor die
        with it: it is placed again until ``deadline``.
        """
        ray = _ray()
        while True:
            try:
                ray.kill(self.actors[index], no_restart=True)
            except Exception:
                pass
            self.actors[index] = self._start(index)
            try:
                endpoint = ray.get(self.actors[index].endpoint.remote(), timeout=max(1.0, deadline - time.monotonic()))
                break
            except ray.exceptions.RayActorError:
                if time.monotonic() + 1.0 > deadline:
                    raise PortalError(f"Ray could not start a new env host {index}: each one died at once") from None
                time.sleep(0.5)
            except ray.exceptions.GetTimeoutError:
                raise PortalError(
                    f"Ray placed no new env host {index} in time: does the cluster still have a node with "
                    f"{self.backend.cpus_per_host:g} free CPUs that the placement strategy allows?"
                ) from None
        self.endpoints[index] = endpoint
        return endpoint

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
