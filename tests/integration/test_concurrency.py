"""Many portals at once: unique names, and gc never touches a live portal's resources."""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import portal_shm
from portal_shm.runtimes.gc import collect

pytestmark = pytest.mark.integration

AGENT = textwrap.dedent("""
    import sys, numpy as np, portal_shm
    envs = portal_shm.make_vec("CartPole-v1", 2, vector_kwargs={"envs_per_server": 2})
    print(envs.tag, flush=True)
    envs.reset(seed=0)
    sys.stdin.readline()  # the test runs gc meanwhile
    for _ in range(200):
        envs.step(np.zeros(2, np.int64))
    envs.close()
    print("ok", flush=True)
""")


def _names(tag: str) -> list:
    return [n for n in os.listdir("/dev/shm") + os.listdir("/tmp") if tag in n]


def test_eight_portals_in_one_process_then_gc_from_another():
    portals = [portal_shm.make_vec("CartPole-v1", 2, vector_kwargs={"envs_per_server": 2}) for _ in range(8)]
    try:
        tags = [p.tag for p in portals]
        assert len(set(tags)) == 8
        before = {tag: sorted(_names(tag)) for tag in tags}
        for p in portals:
            p.reset(seed=0)
        listed = subprocess.run([sys.executable, "-m", "portal_shm", "gc"], capture_output=True, text=True, timeout=120)
        assert listed.returncode == 0, listed.stderr
        assert not any(tag in listed.stdout for tag in tags)
        assert not any(tag in item.name for item in collect() for tag in tags)  # and from this process
        assert {tag: sorted(_names(tag)) for tag in tags} == before
        for _ in range(50):
            for p in portals:
                p.step(np.zeros(2, np.int64))
    finally:
        for p in portals:
            p.close()
    assert not any(_names(tag) for tag in tags)


def test_eight_portals_in_eight_processes_with_gc_running_beside_them():
    agents = [
        subprocess.Popen([sys.executable, "-c", AGENT], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        for _ in range(8)
    ]
    try:
        tags = [agent.stdout.readline().strip().lstrip("/") for agent in agents]
        assert len(set(tags)) == 8 and all(tags)
        collected = collect()
        assert not any(tag in item.name for item in collected for tag in tags)
        for agent in agents:
            agent.stdin.write("\n")
            agent.stdin.flush()
        assert [agent.stdout.readline().strip() for agent in agents] == ["ok"] * 8
        assert [agent.wait(timeout=60) for agent in agents] == [0] * 8
    finally:
        for agent in agents:
            if agent.poll() is None:
                agent.kill()
                agent.wait()
    assert not any(_names(tag) for tag in tags)
