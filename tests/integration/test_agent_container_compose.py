"""examples/compose/docker-compose.yml as its comment runs it: an agent service stepping Pong in
env containers it starts, its run directory on a named volume (a path the host sees elsewhere),
with the same digest as the same run on the host. Needs ``docker compose`` or ``docker-compose``
(Debian: apt-get install docker-compose); skipped without either."""

import json
import os
import shutil
import subprocess
import sys

import pytest

from testkit.agent_container import REPO, STEP_PONG, env_containers, report
from testkit.docker_images import ensure_image

pytestmark = pytest.mark.docker

COMPOSE_FILE = os.path.join(REPO, "examples", "compose", "docker-compose.yml")


def compose_command() -> list:
    if subprocess.run(["docker", "compose", "version"], capture_output=True).returncode == 0:
        return ["docker", "compose"]
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    pytest.skip("neither docker compose nor docker-compose is installed (apt-get install docker-compose)")


def test_the_compose_example_steps_pong_as_the_host_does(docker_client):
    from portal_shm.runtimes.image_build import build_image

    compose = compose_command() + ["-p", f"psmtest{os.getpid()}", "-f", COMPOSE_FILE]
    build_image("agent")  # portal-shm/agent, the image the compose file names, from this checkout
    ale_image = ensure_image(docker_client, "ale", "portal-shm/ale")
    env = {**os.environ, "DOCKER_GID": str(os.stat("/var/run/docker.sock").st_gid)}
    try:
        result = subprocess.run(
            compose + ["up", "--abort-on-container-exit", "--exit-code-from", "agent"],
            capture_output=True, text=True, timeout=300, env=env,
        )  # fmt: skip
    finally:
        subprocess.run(compose + ["down", "--volumes"], capture_output=True, timeout=120, env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    line = next(line for line in result.stdout.splitlines() if '"digest"' in line)
    in_compose = json.loads(line[line.index("{") :])
    assert in_compose["run_dir_base"] == "/run/portal-shm" and in_compose["runtimes"] == ["docker"]
    host = subprocess.run(
        [sys.executable, STEP_PONG, "--backend", "docker", "--image", ale_image, "--num-envs", "8"],
        cwd=REPO, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert host.returncode == 0, host.stderr
    assert in_compose["digest"] == report(host.stdout)["digest"]
    assert env_containers(docker_client) == []
