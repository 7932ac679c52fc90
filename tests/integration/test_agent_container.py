"""The agent in a container: it starts env containers beside it through the host's Docker socket,
and the ring reaches them zero-copy through a run directory on a mount both see.

Runs ``examples/compose/step_pong.py`` (seeded Pong, a digest of everything that came back) on the
host and in agent containers of ``portal_shm/images/agent`` built from this checkout; checks that a killed
agent container leaves nothing behind, that ``portal-shm gc`` works from the host and from a
container, and the errors that say what an agent container lacks. Skipped without Docker, like
the other Docker tests.
"""

import os
import shutil
import subprocess
import sys
import time

import pytest

from testkit.agent_container import REPO, STEP_PONG, env_containers, report
from testkit.docker_images import ensure_image

pytestmark = pytest.mark.docker

AGENT_IMAGE = "portal-shm-test/agent"


@pytest.fixture(scope="module")
def images(docker_client):
    """The agent image from this checkout (its build stage comes from Docker's cache) and the ALE image."""
    from portal_shm.runtimes.image_build import build_image

    return build_image("agent", AGENT_IMAGE), ensure_image(docker_client, "ale", "portal-shm/ale")


def portal_shm_cli(*args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "portal_shm", *args], cwd=REPO, capture_output=True, text=True, timeout=timeout
    )


def agents_dir_entries() -> list:
    from portal_shm.runtimes.agent_run import agents_dir

    return sorted(os.listdir(agents_dir())) if os.path.isdir(agents_dir()) else []


def wait_for(condition, seconds: float, what: str):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"not within {seconds} s: {what}")


@pytest.mark.parametrize("backend", ["process", "docker"])
def test_pong_from_an_agent_container_equals_the_run_on_the_host(images, docker_client, backend):
    agent_image, ale_image = images
    run = [STEP_PONG, "--backend", backend, "--image", ale_image, "--num-envs", "4", "--steps", "60", "--seed", "5"]
    host = subprocess.run([sys.executable, *run], cwd=REPO, capture_output=True, text=True, timeout=240)
    assert host.returncode == 0, host.stderr
    inside = portal_shm_cli("agent", agent_image, "--", "python", *run)
    assert inside.returncode == 0, inside.stderr
    on_host, in_container = report(host.stdout), report(inside.stdout)
    assert in_container["digest"] == on_host["digest"]
    assert in_container["runtimes"] == [backend]
    assert in_container["run_dir_base"].startswith("/tmp/portal-shm-agents/psm-agent-")
    assert env_containers(docker_client) == []
    assert not [e for e in agents_dir_entries() if e.startswith("psm-agent-")]


def test_portal_shm_agent_returns_the_commands_exit_code(images, docker_client):
    agent_image, ale_image = images
    result = portal_shm_cli(
        "agent", agent_image, "--", "python", STEP_PONG, "--image", ale_image, "--num-envs", "2", "--steps", "5",
        "--exit-code", "3",
    )  # fmt: skip
    assert result.returncode == 3, result.stderr
    assert report(result.stdout)["runtimes"] == ["docker"]
    assert portal_shm_cli("agent", agent_image, "--", "false").returncode == 1
    assert env_containers(docker_client) == []


def test_portal_shm_agent_runs_a_training_script(images, docker_client):
    """examples/reinforce_cartpole.py (numpy only: the image has no torch) trains in the agent's
    container, its envs in env servers beside it, and its exit code is the command's."""
    agent_image, _ = images
    result = portal_shm_cli(
        "agent", agent_image, "--", "python", "examples/reinforce_cartpole.py", "--num-envs", "4", "--updates", "20",
        "--steps-per-update", "64",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "update 20/20 episodes=" in result.stdout and "done: 5120 env steps" in result.stdout
    assert not [e for e in agents_dir_entries() if e.startswith("psm-agent-")]


def test_sigkilled_agent_container_under_portal_shm_agent_leaves_nothing(images, docker_client):
    agent_image, ale_image = images
    name = f"psm-agent-test{os.getpid()}"
    front = subprocess.Popen(
        [sys.executable, "-m", "portal_shm", "agent", "--name", name, agent_image, "--", "python", STEP_PONG,
         "--image", ale_image, "--num-envs", "2", "--steps", "1000000", "--no-digest"],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        wait_for(lambda: len(env_containers(docker_client)) == 2, 60, "two env containers")
        docker_client.containers.get(name).kill(signal="SIGKILL")
        started = time.monotonic()
        assert front.wait(timeout=30) == 137
        assert time.monotonic() - started < 10
        assert env_containers(docker_client) == []
        assert name not in agents_dir_entries()
        assert not docker_client.containers.list(all=True, filters={"name": name})
    finally:
        front.kill()
        front.communicate()


@pytest.mark.parametrize("gc_from", ["host", "container"])
def test_sigkilled_agent_container_without_front_process_is_collected_by_gc(images, docker_client, gc_from):
    """As docker compose runs it: no ``portal-shm agent`` in front. The env servers see the lock go, empty
    the run directory and exit; ``portal-shm gc`` removes their containers and the directories."""
    from portal_shm.runtimes.agent_run import agent_user, make_shared_dir

    agent_image, ale_image = images
    name = f"psm-agent-gc{os.getpid()}{gc_from}"
    shared = make_shared_dir(name, agent_user(None))
    socket = "/var/run/docker.sock"
    agent = docker_client.containers.run(
        agent_image,
        ["python", f"/workspace/{STEP_PONG}", "--image", ale_image, "--num-envs", "2", "--steps", "1000000",
         "--no-digest"],
        name=name, detach=True, user="{}:{}".format(*agent_user(None)), group_add=[str(os.stat(socket).st_gid)],
        environment={"PORTAL_SHM_RUN_DIR": shared, "HOME": "/tmp"},
        volumes={socket: {"bind": socket}, shared: {"bind": shared}, REPO: {"bind": "/workspace", "mode": "ro"}},
    )  # fmt: skip
    try:
        wait_for(lambda: len(env_containers(docker_client)) == 2, 60, "two env containers")
        run_dirs = os.listdir(shared)
        assert len(run_dirs) == 1 and run_dirs[0].startswith("psm-")
        agent.kill(signal="SIGKILL")

        def exited() -> bool:
            return all(c.status == "exited" for c in env_containers(docker_client))

        wait_for(exited, 10, "env containers exit when their agent's container dies")
        run_dir = os.path.join(shared, run_dirs[0])
        # (an env container mounts the run directory itself, so its server can empty it but not rmdir it)
        wait_for(lambda: os.listdir(run_dir) == [], 10, "the env servers remove the dead agent's sockets and lock")
        if gc_from == "host":
            result = portal_shm_cli("gc")
        else:
            result = portal_shm_cli("agent", agent_image, "--", "portal-shm", "gc")
        assert result.returncode == 0, result.stderr
        assert "container" in result.stdout
        assert env_containers(docker_client) == []
        if gc_from == "container":  # the agent dir is on the host; the container's gc sees only its own
            assert portal_shm_cli("gc").returncode == 0
        assert not os.path.exists(shared)
    finally:
        agent.remove(force=True)
        for container in env_containers(docker_client):
            container.remove(force=True)
        subprocess.run(["rm", "-rf", shared])


PONG = 'import portal_shm; e = portal_shm.make_vec("ALE/Pong-v5", 1, backend="docker", image="{}"); e.close()'


@pytest.mark.parametrize(
    "setup, message",
    [
        ("no-socket", "without the Docker socket /var/run/docker.sock: mount the host's socket"),
        ("no-group", "cannot open the Docker socket /var/run/docker.sock"),
        ("not-shared", "which env containers cannot see: mount a host directory (or named volume)"),
        ("tmpfs", "is on no bind mount or volume"),
    ],
)
def test_an_agent_container_says_what_it_lacks(images, docker_client, setup, message):
    agent_image, ale_image = images
    socket = "/var/run/docker.sock"
    kwargs: dict = {
        "user": "1000:1000",
        "volumes": {socket: {"bind": socket}},
        "group_add": [str(os.stat(socket).st_gid)],
    }
    if setup == "no-socket":
        kwargs["volumes"] = {}
    if setup == "no-group":
        kwargs["group_add"] = []
    if setup == "tmpfs":
        kwargs.update(tmpfs={"/run/psm": "uid=1000"}, environment={"PORTAL_SHM_RUN_DIR": "/run/psm"})
    container = docker_client.containers.run(
        agent_image, ["python", "-c", PONG.format(ale_image)], detach=True, **kwargs
    )
    try:
        assert container.wait(timeout=120)["StatusCode"] == 1
        logs = container.logs().decode()
        assert message in logs, logs
    finally:
        container.remove(force=True)
    assert env_containers(docker_client) == []


REMOTE = """
import sys, numpy as np, portal_shm
keys = "/run/secrets/portal-shm/"
envs = portal_shm.make_vec("ALE/Pong-v5", 2, backend="remote", hosts=[sys.argv[1]],
                           host_key=keys + sys.argv[2], client_key=keys + sys.argv[3])
obs, _ = envs.reset(seed=0)
for _ in range(10):
    obs, *_ = envs.step(np.zeros(2, dtype=int))
print("stepped", obs.shape, "on", sorted(envs.hosts))
envs.close()
"""


def test_an_agent_container_steps_envs_on_a_remote_host_with_keys_mounted_as_secrets(images, tmp_path):
    from portal_shm.runtimes.agent_run import agent_user
    from testkit.hosts import HostProcess, Keys

    agent_image, _ = images
    keys = Keys(str(tmp_path / "keys"))
    host = HostProcess(keys)
    # What the agent needs (the host's public key, its own pair) in a secrets folder of its own, owned
    # by the container's user: the host's key directory stays the host's (it refuses one another user owns).
    secrets = tmp_path / "secrets"
    secrets.mkdir(mode=0o700)
    for path in (keys.host_key, keys.agent, keys.agent[: -len("_secret")]):
        shutil.copy(path, secrets)
    try:
        subprocess.run(["chown", "-R", "{}:{}".format(*agent_user(None)), str(secrets)], check=True)
        relative = [os.path.basename(path) for path in (keys.host_key, keys.agent)]
        result = portal_shm_cli(
            "agent", "--network", "host", "-v", f"{secrets}:/run/secrets/portal-shm:ro", agent_image, "--",
            "python", "-c", REMOTE, host.address, *relative,
        )  # fmt: skip
    finally:
        host.stop()
    assert result.returncode == 0, result.stderr
    assert "stepped (2, 210, 160, 3) on" in result.stdout


def test_the_agent_image_is_not_an_env_image_hosts_serve(images, docker_client):
    """It holds the docker CLI and runs training commands: hosts never offer it as an env runtime."""
    from portal_shm.errors import HostPolicyError
    from portal_shm.remote.host.policy import HostPolicy
    from portal_shm.runtimes.docker import LABEL_ENV_IMAGE

    agent_image, env_image = images
    assert LABEL_ENV_IMAGE not in (docker_client.images.get(agent_image).labels or {})
    offers = HostPolicy().offers()  # (the images a host runs for agents: RuntimeOffers.image)
    assert offers.image(env_image) == env_image
    with pytest.raises(HostPolicyError, match="not a portal-shm env image"):
        offers.image(agent_image)
