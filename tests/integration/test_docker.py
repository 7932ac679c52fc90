"""Real containers: Pong and ViZDoom through the docker backend, faults, cleanup and the CLI.

Needs a Docker daemon and a base image without a registry (``portal-shm build base``; CI sets
``PORTAL_SHM_BASE_IMAGE``). Skipped without Docker, unless ``PORTAL_SHM_REQUIRE_DOCKER=1`` (CI),
where a missing Docker fails the run instead of hiding it.
"""

import os
import signal
import subprocess
import sys
import textwrap
import time

import gymnasium as gym
import numpy as np
import pytest

import portal_shm
from testkit.compare import assert_same, follow_each_env, rollout
from testkit.docker_images import ensure_image, portal_containers

pytestmark = pytest.mark.docker

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope="module")
def ale_image(docker_client):
    return ensure_image(docker_client, "ale", "portal-shm/ale")


@pytest.fixture(scope="module")
def vizdoom_image(docker_client):
    return ensure_image(docker_client, "vizdoom", "portal-shm/vizdoom")


def test_seeded_pong_in_containers_equals_in_process_gymnasium(ale_image, docker_client):
    ale_py = pytest.importorskip("ale_py")
    gym.register_envs(ale_py)
    kwargs = {"max_episode_steps": 40}
    expected = gym.vector.SyncVectorEnv([lambda: gym.make("ALE/Pong-v5", **kwargs)] * 4)
    envs = portal_shm.make_vec("ALE/Pong-v5", 4, backend="docker", image=ale_image, **kwargs)
    tag = envs.tag
    try:
        assert all("docker container" in server["runtime"] for server in envs.servers)
        assert_same(rollout(envs, 80, seed=3, mode="NextStep"), rollout(expected, 80, seed=3, mode="NextStep"))
    finally:
        envs.close()
        expected.close()
    assert portal_containers(docker_client, tag) == []
    assert not [name for name in os.listdir("/dev/shm") if tag in name]


def test_vizdoom_basic_dict_observation(vizdoom_image):
    envs = portal_shm.make_vec("VizdoomBasic-v1", 2, backend="docker", image=vizdoom_image)
    try:
        assert set(envs.single_observation_space.spaces) == {"screen", "gamevariables"}
        obs, _ = envs.reset(seed=1)
        assert obs["screen"].shape == (2, 240, 320, 3) and obs["screen"].dtype == np.uint8
        first = obs["screen"].copy()
        envs.action_space.seed(1)
        total = 0.0
        for _ in range(30):
            obs, reward, terminated, truncated, _ = envs.step(envs.action_space.sample())
            total += float(reward.sum())
        assert total != 0.0 and first.any()
    finally:
        envs.close()


def test_killed_container_is_reported_with_its_exit_code(ale_image, docker_client):
    envs = portal_shm.make_vec(
        "ALE/Pong-v5", 2, backend="docker", image=ale_image, vector_kwargs={"envs_per_server": 1}
    )
    tag = envs.tag
    try:
        envs.reset(seed=0)
        victim = sorted(portal_containers(docker_client, tag), key=lambda c: c.name)[1]
        victim.kill()
        with pytest.raises(portal_shm.errors.ServerDiedError, match="code 137"):
            for _ in range(50):
                envs.step(np.zeros(2, np.int64))
    finally:
        envs.close()
    assert portal_containers(docker_client, tag) == []


def test_missing_image_is_a_clear_error(docker_client):
    with pytest.raises(portal_shm.PortalError, match="build it first"):
        portal_shm.make_vec("CartPole-v1", 1, backend="docker", image="portal-shm/does-not-exist")


AGENT = textwrap.dedent("""
    import sys, time, portal_shm
    envs = portal_shm.make_vec("ALE/Pong-v5", 2, backend="docker", image=sys.argv[1])
    print(envs.tag, flush=True)
    time.sleep(600)
""")


def test_containers_of_a_sigkilled_agent_exit_and_gc_removes_them(ale_image, docker_client):
    from portal_shm.runtimes.gc import collect
    from portal_shm.runtimes.resources import run_base_dir

    agent = subprocess.Popen([sys.executable, "-c", AGENT, ale_image], stdout=subprocess.PIPE, text=True)
    tag = agent.stdout.readline().strip().lstrip("/")
    assert len(portal_containers(docker_client, tag)) == 2
    agent.send_signal(signal.SIGKILL)
    agent.wait()
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if {c.status for c in portal_containers(docker_client, tag)} <= {"exited", "dead"}:
            break
        time.sleep(0.2)
    assert {c.status for c in portal_containers(docker_client, tag)} <= {"exited", "dead"}
    # the ring was a memfd: it went with the last process holding it; nothing was ever in /dev/shm
    assert not [n for n in os.listdir("/dev/shm") if tag in n]
    collected = collect()
    assert sum(item.kind == "container" for item in collected) >= 2
    assert portal_containers(docker_client, tag) == []
    assert not os.path.exists(os.path.join(run_base_dir(), tag))


def test_custom_env_directory_builds_and_serves(docker_client):
    from portal_shm.runtimes.image_build import build_image

    tag = build_image(os.path.join(REPO, "examples", "custom-env"), "portal-shm-test/gridwalk")
    envs = portal_shm.make_vec("gridwalk", 2, backend="docker", image=tag, size=12)
    try:
        obs, _ = envs.reset(seed=0)
        assert obs.shape == (2, 12)
        _, _, _, _, infos = envs.step(np.ones(2, np.int64))
        assert infos["_position"].all()
    finally:
        envs.close()


def test_cli_test_smoke(ale_image):
    result = subprocess.run(
        [sys.executable, "-m", "portal_shm", "test", ale_image, "--steps", "20"],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "env-steps/s" in result.stdout and "Discrete(6)" in result.stdout


def test_started_listener_containers_serve_attaching_agents(ale_image, docker_client):
    from portal_shm.runtimes.containers import start_listeners, stop_containers

    addresses = start_listeners(ale_image, 2)
    try:
        time.sleep(1.0)
        envs = portal_shm.make_vec("ALE/Pong-v5", 4, backend="attach", address=tuple(addresses))
        try:
            assert {s["runtime"].split(" of listener ")[1] for s in envs.servers} == set(addresses)
            envs.reset(seed=0)
            obs, *_ = envs.step(np.zeros(4, np.int64))
            assert obs.shape == (4, 210, 160, 3)
        finally:
            envs.close()
    finally:
        names = [
            c.name
            for c in docker_client.containers.list(all=True, filters={"label": "portal-shm.role=listener"})
            if c.labels.get("portal-shm.address") in addresses
        ]
        for name in names:
            stop_containers(name=name)
    assert not any(os.path.exists(a[len("ipc://") :]) for a in addresses)


@pytest.mark.parametrize("name", ["mujoco", "flappy-bird", "minigrid", "retro"])
def test_more_images_step_through_a_vector_portal(name, docker_client):
    from portal_shm.runtimes.containers import default_env

    image = ensure_image(docker_client, name, f"portal-shm/{name}")
    env_id, kwargs = default_env(image)
    envs = portal_shm.make_vec(env_id, 2, backend="docker", image=image, env_kwargs=kwargs)
    try:
        obs, _ = envs.reset(seed=0)
        envs.action_space.seed(0)
        for _ in range(20):
            obs, reward, terminated, truncated, _ = envs.step(envs.action_space.sample())
        assert reward.shape == (2,) and terminated.dtype == np.bool_
        fixed = {k: v for k, v in obs.items() if isinstance(v, np.ndarray)} if isinstance(obs, dict) else {"": obs}
        assert all(value.shape[0] == 2 for value in fixed.values())
        if name == "retro":
            assert len(envs.servers) == 2  # the image allows one emulator per server
    finally:
        envs.close()


REFERENCE = textwrap.dedent("""
    import json, sys, gym, numpy as np
    sys.path.insert(0, "/opt/envs")
    env_id, seed, actions = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3])
    if ":" in env_id:
        import psm_legacy_walk
        env = psm_legacy_walk.make()
        env.seed(seed)
        obs, out = env.reset(), []
        for a in actions:
            obs, reward, done, info = env.step(a)
            out.append([obs.tolist(), reward, done])
            if done:
                break
    else:
        env = gym.make(env_id)
        obs, _ = env.reset(seed=seed)
        out = []
        for a in actions:
            obs, reward, terminated, truncated, info = env.step(a)
            out.append([obs.tolist(), reward, terminated or truncated])
            if terminated or truncated:
                break
    print(json.dumps({"versions": [sys.version.split()[0], np.__version__, gym.__version__], "steps": out}))
""")


@pytest.fixture(scope="module")
def legacy_image(docker_client):
    from portal_shm.runtimes.image_build import build_base, build_image

    try:
        docker_client.images.get("portal-shm/legacy")
    except Exception:
        try:
            docker_client.images.get("portal-shm/base:bullseye")
        except Exception:
            build_base("portal-shm/base:bullseye", suite="bullseye")
        build_image("legacy", "portal-shm/legacy", base="portal-shm/base:bullseye")
    return "portal-shm/legacy"


@pytest.mark.parametrize("env_id", ["CartPole-v1", "psm_legacy_walk:make"])
def test_legacy_image_py39_numpy1_gym026_served_to_this_agent(legacy_image, docker_client, env_id):
    import json

    actions = [int(a) for a in np.random.default_rng(0).integers(0, 2, 40)]
    seed = 5
    reference = json.loads(
        docker_client.containers.run(
            legacy_image,
            ["python", "-c", REFERENCE, env_id, str(seed), json.dumps(actions)],
            network_mode="none",
            remove=True,
            stderr=False,
        )
        .decode()
        .strip()
        .splitlines()[-1]
    )
    assert reference["versions"][0].startswith("3.9") and reference["versions"][1].startswith("1.")
    assert reference["versions"][2] == "0.26.2"
    envs = portal_shm.make_vec(
        env_id, 1, backend="docker", image=legacy_image, vector_kwargs={"autoreset_mode": "Disabled"}
    )
    try:
        assert np.__version__.startswith("2.")  # the agent's own numpy
        envs.reset(seed=seed)
        for action, (obs, reward, done) in zip(actions, reference["steps"]):
            got_obs, got_reward, terminated, truncated, _ = envs.step(np.array([action]))
            assert np.array_equal(got_obs[0], np.asarray(obs, got_obs.dtype))
            assert got_reward[0] == reward and bool(terminated[0] or truncated[0]) == done
    finally:
        envs.close()


def test_mixed_runtimes_compare_env_versions_side_by_side(legacy_image):
    from portal_shm import VectorPortal
    from portal_shm.backends import DockerBackend, EnvSpec

    envs = VectorPortal(
        [EnvSpec("CartPole-v1", {}, DockerBackend(image=legacy_image)), EnvSpec("CartPole-v1")],
        observation_mode="different",
    )
    try:
        assert "docker" in envs.servers[0]["runtime"] and "process" in envs.servers[1]["runtime"]
        assert envs.observation_space.shape == (2, 4)
        obs, _ = envs.reset(seed=[5, 5])
        for action in [0, 1, 1, 0, 1, 0, 0]:
            obs, reward, terminated, truncated, _ = envs.step(np.array([action, action]))
            assert np.array_equal(obs[0], obs[1])  # gym 0.26 on Python 3.9 and gymnasium 1.x agree
        with pytest.raises(RuntimeError, match="observation_mode='different'"):
            VectorPortal([EnvSpec("CartPole-v1", {}, DockerBackend(image=legacy_image)), EnvSpec("CartPole-v1")])
    finally:
        envs.close()


def test_containers_run_with_least_privilege(ale_image, docker_client):
    envs = portal_shm.make_vec("ALE/Pong-v5", 1, backend="docker", image=ale_image)
    try:
        (container,) = portal_containers(docker_client, envs.tag)
        host = container.attrs["HostConfig"]
        assert host["NetworkMode"] == "none" and host["CapDrop"] == ["ALL"] and host["ReadonlyRootfs"]
        assert "no-new-privileges" in host["SecurityOpt"]
        # the agent's own uid:gid, never root: a root agent's containers run as nobody, and the
        # portal's files are handed to that user (still 0600/0700)
        user = (65534, 65534) if os.getuid() == 0 else (os.getuid(), os.getgid())
        assert container.attrs["Config"]["User"] == "{}:{}".format(*user)
        assert container.exec_run(["id", "-u"]).output.decode().strip() == str(user[0])
        assert container.labels["portal-shm.owner-pid"] == str(os.getpid())
        run_dir = os.path.dirname(envs._session.resources.lock_path)
        assert oct(os.stat(run_dir).st_mode & 0o777) == "0o700"
        assert all(
            oct(os.stat(os.path.join(run_dir, n)).st_mode & 0o777) == "0o600"
            for n in os.listdir(run_dir)
            if n.endswith(".ctl")
        )
        # the ring reaches the container as a descriptor over a 0600 socket: its /dev/shm is its own
        # IPC namespace's, and it sees nothing of the host's
        assert host["IpcMode"] == "private"
        assert not any(m["Destination"] == "/dev/shm" for m in container.attrs["Mounts"])
        ring_socket = os.path.join(run_dir, "ring.sock")
        assert oct(os.stat(ring_socket).st_mode & 0o777) == "0o600"
        assert {(os.stat(p).st_uid, os.stat(p).st_gid) for p in (run_dir, ring_socket)} == {user}
        seen = container.exec_run(["python", "-c", "import os; print(sorted(os.listdir('/dev/shm')))"]).output.decode()
        assert envs.tag not in seen and "sem." not in seen
        assert host["PidsLimit"] == 1024
    finally:
        envs.close()
    assert not [n for n in os.listdir("/dev/shm") if envs.tag in n]


def test_async_batches_of_containerised_pong_follow_each_env(ale_image, docker_client):
    """Batches of 2 from 2 containers of 2 Pong envs each: every env matches its own in-process env."""
    ale_py = pytest.importorskip("ale_py")
    gym.register_envs(ale_py)
    kwargs, seed = {"max_episode_steps": 12}, 9
    envs = portal_shm.make_vec(
        "ALE/Pong-v5",
        4,
        backend="docker",
        image=ale_image,
        **kwargs,
        vector_kwargs={"batch_size": 2, "envs_per_server": 2},
    )
    expected_envs = [gym.vector.SyncVectorEnv([lambda: gym.make("ALE/Pong-v5", **kwargs)]) for _ in range(4)]
    tag = envs.tag
    try:
        follow_each_env(envs, expected_envs, seed, 40)
    finally:
        envs.close()
        for env in expected_envs:
            env.close()
    assert portal_containers(docker_client, tag) == []
