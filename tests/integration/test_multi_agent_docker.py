"""PettingZoo envs in containers of ``portal-shm/pettingzoo`` (images/pettingzoo): ``make_vec_ma`` on the
docker backend gives the same rows as PettingZoo's own loops in this process, and ``portal-shm test``
smoke-tests the image (its default env, and an AEC game named on the command line).

Needs a Docker daemon and a base image (see tests/integration/test_docker.py); skipped without them.
Builds the image when it is missing (about a minute, cold)."""

import subprocess
import sys

import numpy as np
import pytest
from mpe2 import simple_spread_v3

import portal_shm
from testkit.docker_images import docker_or_skip, ensure_image, portal_containers
from testkit.multi_agent_replay import ParallelReplay, actions_of

pytestmark = pytest.mark.docker

SPREAD = "mpe2.simple_spread_v3:parallel_env"


@pytest.fixture(scope="module")
def client():
    return docker_or_skip()


@pytest.fixture(scope="module")
def image(client):
    return ensure_image(client, "pettingzoo", "portal-shm/pettingzoo")


def test_mpe_x4_in_containers_equals_pettingzoos_loop_in_process(image, client):
    num_envs, seed, cycles = 4, 11, 10
    envs = portal_shm.make_vec_ma(
        SPREAD,
        num_envs,
        backend="docker",
        image=image,
        env_kwargs={"max_cycles": cycles},
        vector_kwargs={"envs_per_server": 1},
    )
    tag = envs.portal.tag
    replays = [ParallelReplay(simple_spread_v3.parallel_env(max_cycles=cycles), seed + i) for i in range(num_envs)]
    try:
        assert len(envs.portal.servers) == num_envs
        assert all("docker container" in server["runtime"] for server in envs.portal.servers)
        expected = [rows for rows, _, _ in (replay.reset() for replay in replays)]
        result = envs.reset(seed=seed)
        rng = np.random.default_rng(seed)
        for step in range(2 * cycles + 3):  # two episodes and their NextStep autoresets
            batch = result.groups["agent"]
            for row, (e, agent) in enumerate(envs.agent_ids["agent"]):
                want = expected[e][agent]
                np.testing.assert_array_equal(batch.obs[row], want["obs"], err_msg=f"step {step} env {e} {agent}")
                assert (batch.reward[row], batch.terminated[row], batch.truncated[row], batch.mask[row]) == (
                    want["reward"],
                    want["terminated"],
                    want["truncated"],
                    want["mask"],
                ), f"step {step}, env {e}, {agent}"
            actions = {"agent": rng.integers(0, 5, num_envs * 3)}
            result = envs.step(actions)
            expected = [replay.step(actions_of(envs, actions, i))[0] for i, replay in enumerate(replays)]
    finally:
        envs.close()
        for replay in replays:
            replay.env.close()
    assert portal_containers(client, tag) == []


@pytest.mark.parametrize(
    "args, shown",
    [
        ([], "mpe2.simple_spread_v3:parallel_env"),  # the image's default env label
        (
            ["--env", "portal_shm.server.multi_agent:aec", "--init-arg", "env_id=classic/tictactoe-v3"],
            "MultiDiscrete([9 9])",
        ),
    ],
)
def test_cli_smoke_test_serves_pettingzoo_envs(image, args, shown):
    result = subprocess.run(
        [sys.executable, "-m", "portal_shm", "test", image, "--steps", "30", *args],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert shown in result.stdout and "env-steps/s" in result.stdout
