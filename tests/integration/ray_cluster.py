"""A multi-node Ray cluster on this machine for the ``backend="ray"`` tests, and process checks.

Every node binds 127.0.0.1 (``conftest.py`` sets what keeps Ray from rewriting it).
"""

from __future__ import annotations

import os
import time

import ray
from ray.cluster_utils import Cluster

NODE = {"num_cpus": 1, "node_ip_address": "127.0.0.1"}


def start_cluster(workers: int = 2) -> Cluster:
    """A head and ``workers`` worker nodes of one CPU each, this process connected as the driver."""
    cluster = Cluster(initialize_head=True, head_node_args={**NODE, "include_dashboard": False})
    nodes = [cluster.add_node(**NODE) for _ in range(workers)]
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, log_to_driver=False)
    cluster.workers = nodes
    return cluster


def shutdown(cluster: Cluster) -> None:
    ray.shutdown()
    cluster.shutdown()


def pid_gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as handle:  # a zombie counts as gone
            return handle.read().split(")")[-1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def parent(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as handle:
        return int(handle.read().split(")")[-1].split()[1])


def children(pid: int) -> list:
    """The processes ``pid`` started (its threads' children too), from /proc."""
    found = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except FileNotFoundError:
        return found
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/children") as handle:
                found += [int(c) for c in handle.read().split()]
        except FileNotFoundError:
            pass
    return found


def server_pids(envs) -> list:
    """The env servers of a Ray portal's hosts: their processes' children (hosts tell agents no pids)."""
    return [child for host in envs.host_endpoints() for child in children(host["pid"])]


def wait_gone(pids: list, seconds: float) -> float:
    started = time.monotonic()
    while not all(pid_gone(p) for p in pids) and time.monotonic() - started < seconds:
        time.sleep(0.1)
    return time.monotonic() - started


def worker_host(cluster: Cluster, nodes: list) -> int:
    """The index of the first host (of ``nodes``, each host's Ray node id) on a worker node."""
    return next(i for i, node in enumerate(nodes) if node != cluster.head_node.node_id)


def remove_node(cluster: Cluster, node_id: str) -> None:
    """Remove the worker node with Ray node id ``node_id`` at once, as a lost machine vanishes."""
    node = next(node for node in cluster.workers if node.node_id == node_id)
    cluster.remove_node(node, allow_graceful=False)


def all_cpus_free(seconds: float = 15.0) -> bool:
    """Whether every CPU of the cluster is free again within ``seconds`` (Ray frees them a moment
    after the actors and placement groups that held them are gone)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if ray.available_resources().get("CPU") == ray.cluster_resources().get("CPU"):
            return True
        time.sleep(0.1)
    return False
