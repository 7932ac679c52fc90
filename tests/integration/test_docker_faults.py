"""Faults inside containers: out of memory, hangs, docker kill under the restart policy.

The image is built from ``images/faults`` with the portal_shm of this checkout, so FaultyEnv's
faults (and the env server under test) run inside the container.
"""

import os
import signal
import time

import numpy as np
import pytest

import portal_shm
from portal_shm import VectorPortal
from portal_shm.backends import DockerBackend, EnvSpec
from testkit.docker_images import docker_or_skip, portal_containers

pytestmark = pytest.mark.docker

HERE = os.path.dirname(os.path.abspath(__file__))
FAULTY = "portal_shm.server.example_envs:FaultyEnv"


@pytest.fixture(scope="module")
def client():
    return docker_or_skip()


@pytest.fixture(scope="module")
def faults_image(client):
    from portal_shm.runtimes.image_build import build_image

    return build_image(os.path.join(HERE, "images", "faults"), "portal-shm-test/faults")


def _leftovers(tag: str) -> list:
    return [n for n in os.listdir("/dev/shm") + os.listdir("/tmp") if tag in n]


def test_container_out_of_memory_is_reported_as_such(faults_image, client):
    backend = DockerBackend(image=faults_image, mem_limit="192m")
    envs = VectorPortal(
        [
            EnvSpec(FAULTY, {"fault": "none"}, backend),
            EnvSpec(FAULTY, {"fault": "oom", "phase": "step", "after": 2}, backend),
        ],
        envs_per_server=1,
        step_timeout=60,
    )
    tag = envs.tag
    try:
        envs.reset(seed=0)
        with pytest.raises(portal_shm.errors.ServerDiedError, match=r"out of memory") as info:
            for _ in range(5):
                envs.step(np.zeros(2, np.int64))
        assert info.value.env_indices == [1] and "docker container" in str(info.value)
        (victim,) = [c for c in portal_containers(client, tag) if c.labels["portal-shm.server"] == "1"]
        assert victim.attrs["HostConfig"]["Memory"] == 192 * 2**20
    finally:
        envs.close()
    assert portal_containers(client, tag) == [] and _leftovers(tag) == []


@pytest.mark.parametrize("fault", ["spin", "stop"])
def test_hung_container_times_out_and_is_removed(faults_image, client, fault):
    envs = VectorPortal(
        [EnvSpec(FAULTY, {"fault": fault, "phase": "step", "after": 1}, DockerBackend(image=faults_image))],
        step_timeout=1.0,
    )
    tag = envs.tag
    try:
        envs.reset(seed=0)
        started = time.monotonic()
        with pytest.raises(portal_shm.errors.PortalTimeoutError, match=r"envs \[0\]\) \[runtime: docker container"):
            envs.step(np.zeros(1, np.int64))
        assert time.monotonic() - started < 30  # an upper bound for a hang, not a timing claim
    finally:
        envs.close()
    assert portal_containers(client, tag) == [] and _leftovers(tag) == []


def test_docker_killed_container_is_restarted(faults_image, client):
    backend = DockerBackend(image=faults_image)
    envs = VectorPortal(
        [EnvSpec(FAULTY, {"fault": "none"}, backend)] * 2, envs_per_server=1, on_env_failure="restart", step_timeout=60
    )
    tag = envs.tag
    try:
        envs.reset(seed=0)
        before = {c.labels["portal-shm.server"]: c.id for c in portal_containers(client, tag)}
        client.containers.get(before["1"]).kill()
        restarted = np.zeros(2, bool)
        for _ in range(200):
            obs, reward, terminated, truncated, infos = envs.step(np.zeros(2, np.int64))
            if "_env_restarted" in infos:
                restarted |= infos["_env_restarted"]
                assert "code 137" in infos["env_failure"][1]
                break
        assert restarted.tolist() == [False, True]
        obs, reward, *_ = envs.step(np.zeros(2, np.int64))  # the fresh env's reset ...
        obs, reward, *_ = envs.step(np.zeros(2, np.int64))  # ... then it steps again
        assert reward.tolist() == [1.0, 1.0]
        after = {c.labels["portal-shm.server"]: c.id for c in portal_containers(client, tag) if c.status == "running"}
        assert after["0"] == before["0"] and after["1"] != before["1"]
    finally:
        envs.close()
    assert portal_containers(client, tag) == [] and _leftovers(tag) == []


def _open_sockets() -> int:
    return sum(os.readlink(f"/proc/self/fd/{fd}").startswith("socket:") for fd in _fds())


def _fds() -> list:
    out = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            os.readlink(f"/proc/self/fd/{fd}")
            out.append(fd)
        except OSError:  # the listing's own descriptor, closed by now
            pass
    return out


def test_restarted_containers_leave_the_agent_no_socket_to_the_daemon(faults_image, client):
    """Each container start made a docker client of its own and nothing closed its connections:
    every restart or recycle left the agent sockets to /var/run/docker.sock (found by the chaos soak,
    benchmarks/chaos.py: +20 in 22 container starts)."""
    backend = DockerBackend(image=faults_image)
    envs = VectorPortal([EnvSpec(FAULTY, {"fault": "none"}, backend)] * 2, on_env_failure="restart", step_timeout=60)
    try:
        envs.reset(seed=0)
        envs.step(np.zeros(2, np.int64))
        before = _open_sockets()
        for k in range(4):
            os.kill(envs.servers[k % 2]["pid"], signal.SIGKILL)
            for _ in range(200):
                infos = envs.step(np.zeros(2, np.int64))[4]
                if "_env_restarted" in infos:
                    break
            envs.step(np.zeros(2, np.int64))
        assert envs.restarts == [2, 2]
        assert _open_sockets() == before
    finally:
        envs.close()


AGENT = """
import sys, numpy as np
from portal_shm import VectorPortal
from portal_shm.backends import DockerBackend, EnvSpec
envs = VectorPortal([EnvSpec("portal_shm.server.example_envs:FaultyEnv", {"fault": "spin", "phase": "step"},
                             DockerBackend(image=sys.argv[1]))])
print(envs.tag, flush=True)
envs.reset(seed=0)
print("stepping", flush=True)
envs.step(np.zeros(1, np.int64))
"""


def test_container_stuck_in_an_env_exits_when_its_agent_is_sigkilled(faults_image, client):
    """The server's watchdog thread sees the agent's lock go even while the env spins."""
    import signal
    import subprocess
    import sys

    from portal_shm.runtimes.gc import collect

    agent = subprocess.Popen([sys.executable, "-c", AGENT, faults_image], stdout=subprocess.PIPE, text=True)
    tag = agent.stdout.readline().strip().lstrip("/")
    assert agent.stdout.readline().strip() == "stepping"
    time.sleep(1.0)
    agent.send_signal(signal.SIGKILL)
    agent.wait()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and any(c.status == "running" for c in portal_containers(client, tag)):
        time.sleep(0.2)
    assert [c.status for c in portal_containers(client, tag)] == ["exited"]
    assert not [n for n in os.listdir("/dev/shm") if tag in n]  # the ring never had a name
    collect()
    assert portal_containers(client, tag) == [] and _leftovers(tag) == []


def test_ipc_host_is_an_explicit_opt_in(faults_image, client):
    envs = VectorPortal([EnvSpec(FAULTY, {"fault": "none"}, DockerBackend(image=faults_image, ipc_host=True))])
    tag = envs.tag
    try:
        (container,) = portal_containers(client, tag)
        assert container.attrs["HostConfig"]["IpcMode"] == "host"
        assert not [n for n in os.listdir("/dev/shm") if tag in n]  # the ring is a memfd all the same
        envs.reset(seed=0)
        _, reward, *_ = envs.step(np.zeros(1, np.int64))
        assert reward.tolist() == [1.0]
    finally:
        envs.close()
    assert portal_containers(client, tag) == [] and _leftovers(tag) == []
