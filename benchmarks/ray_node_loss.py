"""How long losing a Ray node takes to surface or recover under ``backend="ray"``, defaults kept
(``heartbeat_timeout=10``), on a head and two worker nodes of this machine (127.0.0.1):

- without a restart policy: seconds from the node's removal until a step raises HostLostError;
- with ``on_env_failure="restart"``: seconds from the removal until the step that brings the lost
  envs back (restarted on a new host that Ray placed on a live node) returns;
- a driver SIGKILLed: seconds until its host actors and their env servers are gone.

    python benchmarks/ray_node_loss.py --repeat 2 --json benchmarks/results/ray_node_loss_2core.json
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time

os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"

import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the repository root: testkit/

import portal_shm  # noqa: E402
from testkit.procs import pid_gone, wait_gone  # noqa: E402
from testkit.ray_cluster import DRIVER, remove_node, shutdown, start_cluster, worker_host  # noqa: E402


def node_lost(restart: bool) -> float:
    cluster = start_cluster()
    try:
        vector_kwargs = {"on_env_failure": "restart"} if restart else {}
        envs = portal_shm.make_vec("CartPole-v1", 4, backend="ray", num_hosts=2, vector_kwargs=vector_kwargs)
        try:
            envs.reset(seed=0)
            nodes = envs.host_nodes()
            lost = worker_host(cluster, nodes)
            remove_node(cluster, nodes[lost])
            started = time.monotonic()
            try:
                while "env_restarted" not in envs.step(np.zeros(4, np.int64))[4]:
                    pass
            except portal_shm.errors.HostLostError:
                if restart:
                    raise
            return time.monotonic() - started
        finally:
            envs.close()
    finally:
        shutdown(cluster)


def driver_killed() -> float:
    cluster = start_cluster()
    try:
        driver = subprocess.Popen([sys.executable, "-c", DRIVER, cluster.address], stdout=subprocess.PIPE, text=True)
        pids = [int(p) for p in driver.stdout.readline().split()]
        driver.send_signal(signal.SIGKILL)
        driver.wait()
        took = wait_gone(pids, 60)
        if not all(pid_gone(p) for p in pids):
            raise RuntimeError("a killed driver's hosts or envs outlived it")
        return took
    finally:
        shutdown(cluster)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--json", help="write the timings here")
    args = parser.parse_args()
    results: dict = {"node_lost_host_lost_error_s": [], "node_lost_restarted_s": [], "driver_killed_cleaned_s": []}
    for _ in range(args.repeat):
        results["node_lost_host_lost_error_s"].append(round(node_lost(restart=False), 2))
        results["node_lost_restarted_s"].append(round(node_lost(restart=True), 2))
        results["driver_killed_cleaned_s"].append(round(driver_killed(), 2))
    print(json.dumps(results, indent=2))
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"heartbeat_timeout_s": 10.0, **results}, handle, indent=2)


if __name__ == "__main__":
    main()
