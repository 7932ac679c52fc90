"""Node loss under ``backend="ray"``: a worker node removed mid-run, as a lost machine vanishes.

Each test has a cluster of its own (a head and two worker nodes on 127.0.0.1), since it takes a
node away. Without a restart policy the loss is ``HostLostError`` within the heartbeat timeout; with
``on_env_failure="restart"`` a new host starts on a live node and only the lost node's envs restart.
"""

import time

import gymnasium as gym
import numpy as np
import pytest

import portal_shm

ray = pytest.importorskip("ray")
from testkit.ray_cluster import remove_node, shutdown, start_cluster, worker_host  # noqa: E402

pytestmark = pytest.mark.slow  # each case waits out a heartbeat timeout


@pytest.fixture
def cluster():
    cluster = start_cluster()
    yield cluster
    shutdown(cluster)


def test_a_removed_node_is_host_lost_error_within_the_timeout(cluster):
    envs = portal_shm.make_vec(
        "CartPole-v1", 4, backend="ray", num_hosts=2, strategy="STRICT_SPREAD", heartbeat_timeout=3.0
    )
    try:
        envs.reset(seed=0)
        lost = worker_host(cluster, envs.host_nodes())
        remove_node(cluster, envs.host_nodes()[lost])
        started = time.monotonic()
        with pytest.raises(portal_shm.errors.HostLostError) as info:
            for _ in range(1000):
                envs.step(np.zeros(4, np.int64))
        took = time.monotonic() - started
        assert info.value.env_indices == [2 * lost, 2 * lost + 1]
        assert took < 10, took
        print(f"node loss surfaced as HostLostError after {took:.1f} s")
    finally:
        envs.close()


def test_a_removed_node_s_envs_restart_on_a_new_host_and_the_others_go_on(cluster):
    envs = portal_shm.make_vec(
        "CartPole-v1",
        6,
        backend="ray",
        heartbeat_timeout=3.0,
        heartbeat_interval=0.5,
        max_episode_steps=500,
        vector_kwargs={"on_env_failure": "restart"},
    )
    try:
        envs.reset(seed=0)
        nodes = envs.host_nodes()
        lost = worker_host(cluster, nodes)
        assert len(set(nodes)) == 3  # one host per node: the placement group has no room for another
        kept = [j for j in range(6) if j // 2 != lost]
        reference = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1", max_episode_steps=500)] * 6)
        reference.reset(seed=0)
        actions = np.zeros(6, np.int64)
        remove_node(cluster, nodes[lost])
        started = time.monotonic()
        for _ in range(2000):  # the node's processes die a moment after its raylet
            obs, reward, terminated, truncated, infos = envs.step(actions)
            expected = reference.step(actions)
            if "env_restarted" in infos:
                break
            np.testing.assert_array_equal(obs, expected[0])
        took = time.monotonic() - started
        lost_envs = [2 * lost, 2 * lost + 1]
        assert truncated[lost_envs].all() and (reward[lost_envs] == 0).all()
        assert infos["env_restarted"][lost_envs].all() and not infos["_env_restarted"][kept].any()
        np.testing.assert_array_equal(obs[kept], expected[0][kept])  # the other host's envs went on
        new_nodes = envs.host_nodes()
        alive = {node["NodeID"] for node in ray.nodes() if node["Alive"]}
        assert new_nodes[lost] != nodes[lost] and new_nodes[lost] in alive
        assert [n for i, n in enumerate(new_nodes) if i != lost] == [n for i, n in enumerate(nodes) if i != lost]
        obs, *_ = envs.step(actions)  # the restarted envs' reset (NextStep autoreset)
        for _ in range(20):
            obs, reward, terminated, truncated, infos = envs.step(actions)
            assert obs.shape == (6, 4)
        print(f"a removed node's envs restarted on a new host after {took:.1f} s")
        reference.close()
    finally:
        envs.close()


def test_with_async_batches_a_removed_node_s_envs_come_back_truncated_from_a_new_host(cluster):
    envs = portal_shm.make_vec(
        "CartPole-v1",
        4,
        backend="ray",
        num_hosts=2,
        heartbeat_timeout=3.0,
        heartbeat_interval=0.5,
        vector_kwargs={"on_env_failure": "restart", "batch_size": 2},
    )
    try:
        obs, infos = envs.reset(seed=0)
        nodes = envs.host_nodes()
        lost = worker_host(cluster, nodes)
        lost_envs = {2 * lost, 2 * lost + 1}
        rng = np.random.default_rng(0)
        ids, restarted, started = infos["env_id"], set(), None
        for step in range(20000):
            if step == 10:
                remove_node(cluster, nodes[lost])
                started = time.monotonic()
            envs.send(rng.integers(0, 2, 2), ids)
            obs, reward, terminated, truncated, infos = envs.recv()
            ids = infos["env_id"]
            if infos.get("env_restarted", np.zeros(2, bool)).any():
                assert set(ids.tolist()) == lost_envs and truncated.all() and (reward == 0).all()
                restarted.update(ids.tolist())
            if restarted == lost_envs and time.monotonic() - started > 1:
                break
        assert restarted == lost_envs
        assert envs.host_nodes()[lost] != nodes[lost] and envs.host_nodes()[1 - lost] == nodes[1 - lost]
        print(f"async batches: the removed node's envs came back after {time.monotonic() - started:.1f} s")
    finally:
        envs.close()
