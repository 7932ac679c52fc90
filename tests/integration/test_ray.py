"""``backend="ray"`` on a real multi-node Ray cluster on this machine (a head and two worker nodes).

Every Ray process and every env host binds 127.0.0.1 only (see ``conftest.py``). Results are compared
with gymnasium's SyncVectorEnv (lockstep) and each env's own gymnasium env (async batches); nodes
are removed mid-run as a lost machine would vanish.
"""

import os
import signal
import subprocess
import sys

import gymnasium as gym
import pytest

import portal_shm
from testkit.compare import assert_same, rollout

ray = pytest.importorskip("ray")
from testkit.procs import pid_gone, server_parent, wait_gone  # noqa: E402
from testkit.ray_cluster import DRIVER, all_cpus_free, server_pids, shutdown, start_cluster  # noqa: E402

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def cluster():
    cluster = start_cluster()
    yield cluster
    shutdown(cluster)


def test_envs_run_on_two_nodes_and_match_sync_vector_env(cluster):
    expected_envs = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1", max_episode_steps=30)] * 4)
    envs = portal_shm.make_vec("CartPole-v1", 4, backend="ray", num_hosts=2, max_episode_steps=30)
    try:
        nodes = envs.host_nodes()
        assert len(set(nodes)) == 2, nodes
        alive = {n["NodeID"] for n in ray.nodes() if n["Alive"]}
        assert set(nodes) <= alive
        assert all(host["address"].startswith("tcp://127.0.0.1:") for host in envs.host_endpoints())
        for host in envs.host_endpoints():  # the host's secret key lives in its socket only
            assert not os.path.exists(os.path.join(host["run_dir"], "host", "host.key_secret"))
        hosts = [e["pid"] for e in envs.host_endpoints()]
        servers = server_pids(envs)
        assert len(servers) == 4 and {server_parent(p) for p in servers} == set(hosts), (servers, hosts)
        assert envs.single_observation_space == expected_envs.single_observation_space
        assert_same(rollout(envs, 120, seed=3, mode="NextStep"), rollout(expected_envs, 120, seed=3, mode="NextStep"))
    finally:
        envs.close()
        expected_envs.close()
    assert wait_gone(hosts + servers, 20) < 20, "close() left actors or env servers alive"
    assert all_cpus_free(), "close() left actors or the placement group holding CPUs"


def test_what_the_cluster_cannot_place_is_refused_clearly(cluster):
    with pytest.raises(portal_shm.PortalError, match="cannot go on distinct nodes: the cluster has 3 alive"):
        portal_shm.make_vec("CartPole-v1", 8, backend="ray", num_hosts=4, strategy="STRICT_SPREAD")
    with pytest.raises(
        portal_shm.PortalError,
        match=r"4 env hosts of 1 CPU each need 4 CPUs; the Ray cluster has 3 CPUs on 3 alive nodes",
    ):
        portal_shm.make_vec("CartPole-v1", 8, backend="ray", num_hosts=4)
    with pytest.raises(portal_shm.PortalError, match=r"could not place 2 env hosts of 1\.5 CPU.*lower num_hosts"):
        portal_shm.make_vec("CartPole-v1", 2, backend="ray", num_hosts=2, cpus_per_host=1.5, placement_timeout=2)
    with pytest.raises(portal_shm.PortalError, match="cannot be spread over 3"):
        portal_shm.make_vec("CartPole-v1", 2, backend="ray")
    with pytest.raises(ValueError, match="runtime='attach'"):
        portal_shm.make_vec("CartPole-v1", 2, backend="ray", runtime="attach")
    with pytest.raises(portal_shm.PortalError, match="NoSuchEnv"):  # refused by the hosts, once placed
        portal_shm.make_vec("NoSuchEnv-v0", 2, backend="ray", num_hosts=2)
    assert all_cpus_free(), "a refused portal kept its placement group or its hosts"


@pytest.mark.docker
def test_docker_envs_on_the_nodes(cluster):
    from testkit.docker_images import docker_or_skip, ensure_image

    client = docker_or_skip()
    image = ensure_image(client, "ale", "portal-shm/ale")
    ale_py = pytest.importorskip("ale_py")
    gym.register_envs(ale_py)
    expected_envs = gym.vector.SyncVectorEnv([lambda: gym.make("ALE/Pong-v5", max_episode_steps=30)] * 2)
    envs = portal_shm.make_vec(
        "ALE/Pong-v5", 2, backend="ray", num_hosts=2, runtime="docker", image=image, max_episode_steps=30
    )
    try:
        assert all(s.startswith("docker") for host in envs.hosts for s in host["servers"]), envs.hosts
        assert_same(rollout(envs, 30, seed=2, mode="NextStep"), rollout(expected_envs, 30, seed=2, mode="NextStep"))
    finally:
        envs.close()
        expected_envs.close()


def test_a_killed_driver_leaves_no_host_and_no_env_and_the_next_host_reclaims_its_files(cluster):
    from portal_shm.runtimes.gc import find_leftovers

    driver = subprocess.Popen([sys.executable, "-c", DRIVER, cluster.address], stdout=subprocess.PIPE, text=True)
    try:
        pids = [int(p) for p in driver.stdout.readline().split()]
        # 2 hosts, 4 env servers (and, where a host forked its 2 servers, the zygote that did)
        assert len(pids) in (6, 7, 8) and not any(pid_gone(p) for p in pids)
    finally:
        driver.send_signal(signal.SIGKILL)
        driver.wait()
    took = wait_gone(pids, 60)
    assert all(pid_gone(p) for p in pids), "a killed driver's hosts or envs outlived it"
    print(f"a killed driver's hosts and envs were gone after {took:.1f} s")
    hosts = set(pids[:2])
    # Ray killed the hosts' process trees at once: their run directories (keys gone) wait for a
    # reclaimer. (A host that saw its driver go before Ray killed it, on a loaded machine, removed its
    # own: what is left is whatever the kill left.)
    left = {leftover.owner_pid for leftover in find_leftovers()} & hosts
    assert left, "Ray's kill left no run directory of the hosts to reclaim"
    envs = portal_shm.make_vec("CartPole-v1", 1, backend="ray", num_hosts=1)
    try:
        assert envs.host_endpoints()[0]["reclaimed"] >= len(left)
        assert not {leftover.owner_pid for leftover in find_leftovers()} & hosts
    finally:
        envs.close()


def test_bench_measures_ray_placed_hosts_and_the_naive_ray_way(cluster):
    from portal_shm.bench import BenchOptions, parse_scenarios, run_bench

    options = BenchOptions(
        parse_scenarios(["null:16x16x3"]),
        num_envs=[2],
        against=["ray", "ray-naive"],
        seconds=0.3,
        repeat=1,
        warmup=2,
        alloc_steps=0,
        references=False,
    )
    report = run_bench(options, command=["test"])
    assert not report["errors"]
    samples = {s["system"]: s for s in report["samples"]}
    assert {"ray", "ray-naive"} <= set(samples), report
    assert all(samples[name]["steps_per_s"] > 0 for name in ("ray", "ray-naive"))
    assert all_cpus_free(), "the bench left actors or a placement group behind"
