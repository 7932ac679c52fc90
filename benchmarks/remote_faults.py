"""How long remote faults take to surface, with the default heartbeat_timeout (10 s).

- a host SIGKILLed mid-run: seconds until the agent's step raises HostLostError;
- an agent SIGKILLed: seconds until the host has freed its envs (their server processes gone);
- a host restarted on the same port with on_env_failure="restart": seconds the step that finds
  the loss takes, reconnect and reset included.

    python benchmarks/remote_faults.py --json benchmarks/results/remote_faults_2core.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the repository root: testkit/

import portal_shm  # noqa: E402
from testkit.hosts import AGENT, HostProcess, Keys, free_port  # noqa: E402
from testkit.procs import pid_gone  # noqa: E402


def host_killed(keys: Keys) -> float:
    host = HostProcess(keys)
    envs = portal_shm.make_vec("CartPole-v1", 2, backend="remote", hosts=[host.address], **keys.options())
    try:
        envs.reset(seed=0)
        envs.step(np.zeros(2, np.int64))
        host.kill()
        started = time.monotonic()
        try:
            envs.step(np.zeros(2, np.int64))
        except portal_shm.errors.HostLostError:
            return time.monotonic() - started
        raise RuntimeError("no HostLostError")
    finally:
        envs.close()


def agent_killed(keys: Keys) -> float:
    host = HostProcess(keys)
    try:
        agent = subprocess.Popen(
            [
                sys.executable,
                "-c",
                AGENT.replace("heartbeat_timeout=4.0", "heartbeat_timeout=10.0"),
                host.address,
                keys.host_key,
                keys.agent,
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        pids = [int(p) for p in agent.stdout.readline().split()]
        time.sleep(1)
        agent.kill()
        agent.wait()
        started = time.monotonic()
        while not all(pid_gone(p) for p in pids):
            time.sleep(0.05)
        return time.monotonic() - started
    finally:
        host.stop()


def host_restarted(keys: Keys) -> float:
    port = free_port()
    host = HostProcess(keys, port=port)
    envs = portal_shm.make_vec(
        "CartPole-v1",
        2,
        backend="remote",
        hosts=[host.address],
        **keys.options(),
        vector_kwargs={"on_env_failure": "restart"},
    )
    try:
        envs.reset(seed=0)
        envs.step(np.zeros(2, np.int64))
        host.kill()
        host = HostProcess(keys, port=port)
        started = time.monotonic()
        _, _, _, truncated, infos = envs.step(np.zeros(2, np.int64))
        assert truncated.all() and infos["env_restarted"].all()
        return time.monotonic() - started
    finally:
        envs.close()
        host.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    with Keys.temporary("portal-shm-faults-") as keys:  # (removed at the end, secret keys first)
        results = {
            name: [round(fn(keys), 2) for _ in range(args.repeat)]
            for name, fn in (
                ("host_killed_to_host_lost_error_s", host_killed),
                ("agent_killed_to_envs_freed_s", agent_killed),
                ("host_restarted_step_s", host_restarted),
            )
        }
    results["heartbeat_timeout_s"] = 10.0
    print(json.dumps(results, indent=1))
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(results, handle, indent=1)


if __name__ == "__main__":
    main()
