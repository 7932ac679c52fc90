"""A multi-node Ray cluster on this machine for ``backend="ray"``, and a driver process to kill.

Every node binds 127.0.0.1: set ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` before Ray is imported
(``tests/integration/conftest.py`` does) to keep Ray from rewriting it.
"""

from __future__ import annotations

import textwrap
import time

import ray
from ray.cluster_utils import Cluster

from testkit.procs import server_children

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


def server_pids(envs) -> list:
    """The env servers of a Ray portal's hosts: their processes' children (hosts tell agents no pids)."""
    return [child for host in envs.host_endpoints() for child in server_children(host["pid"])]


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


# A driver process (``python -c DRIVER ADDRESS``) of a Ray portal of 4 CartPoles on 2 hosts: prints
# its hosts' pids and their env servers' pids, then steps until it is killed.
DRIVER = textwrap.dedent("""
    import os, re, sys, time
    import numpy as np
    import portal_shm
    envs = portal_shm.make_vec("CartPole-v1", 4, backend="ray", num_hosts=2, address=sys.argv[1])
    envs.reset(seed=0)
    envs.step(np.zeros(4, np.int64))
    hosts = [e["pid"] for e in envs.host_endpoints()]
    def under(p):  # every process under p: its env servers, their zygote too
        kids = [int(c) for t in os.listdir(f"/proc/{p}/task") for c in open(f"/proc/{p}/task/{t}/children").read().split()]
        return kids + [g for k in kids for g in under(k)]
    servers = [s for h in hosts for s in under(h)]
    print(*hosts, *servers, flush=True)
    while True:
        envs.step(np.zeros(4, np.int64))
""")
