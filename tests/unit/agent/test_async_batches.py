"""Async batches: each env's trajectory is exactly its own gymnasium env's, whatever order envs finish in."""

import time

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.error import AlreadyPendingCallError, NoAsyncCallError

import portal_shm
from portal_shm.agent.local.batches import ServerQueue
from portal_shm.errors import EnvError, PortalError
from portal_shm.server.example_envs import NestedEnv
from portal_shm.wire.doorbell import AnyDone, Bell, Waiter, bell_pipe
from portal_shm.wire.layout import MAILBOX_FIELDS, STATUS_OK, STATUS_PENDING
from testkit.compare import check_batch, row


def replicas(factory, count, mode, seed):
    envs = [gym.vector.SyncVectorEnv([factory], autoreset_mode=mode) for _ in range(count)]
    return envs, [env.reset(seed=seed + i) for i, env in enumerate(envs)]


CASES = [
    ("CartPole-v1", lambda: gym.make("CartPole-v1", max_episode_steps=15), {"max_episode_steps": 15}),
    ("portal_shm.server.example_envs:NestedEnv", NestedEnv, {}),
]


@pytest.mark.parametrize("mode", ["NextStep", "SameStep"])
@pytest.mark.parametrize("envs_per_server", [1, 2])
@pytest.mark.parametrize("env_id, factory, kwargs", CASES, ids=["cartpole", "nested"])
def test_every_env_follows_its_own_trajectory(env_id, factory, kwargs, envs_per_server, mode):
    num_envs, batch_size, seed = 6, 2 * envs_per_server, 40
    envs = portal_shm.make_vec(
        env_id,
        num_envs,
        **kwargs,
        vector_kwargs={"batch_size": batch_size, "envs_per_server": envs_per_server, "autoreset_mode": mode},
    )
    expected_envs, resets = replicas(factory, num_envs, mode, seed)
    try:
        expected = dict(enumerate(resets))
        obs, infos = envs.reset(seed=seed)
        assert infos["env_id"].tolist() == list(range(batch_size))
        check_batch((obs, None, None, None, infos), expected)
        envs.action_space.seed(seed)
        ids = infos["env_id"]
        seen = set()
        for _ in range(150):
            actions = envs.action_space.sample()
            envs.send(actions, ids)
            for j, env_id in enumerate(ids.tolist()):
                expected[env_id] = expected_envs[env_id].step(row(actions, j))
            result = envs.recv()
            ids = result[4]["env_id"]
            assert len(ids) == batch_size and list(ids) == sorted(ids)
            check_batch(result, expected)
            seen.update(ids.tolist())
        assert seen == set(range(num_envs))
    finally:
        envs.close()
        for env in expected_envs:
            env.close()


def ring_array(envs, name):
    return envs._session.ring.views[name]


def test_one_server_per_batch_gives_ring_views_and_several_give_copies():
    views = {"batch_size": 2, "copy": False}
    envs = portal_shm.make_vec("CartPole-v1", 4, vector_kwargs={**views, "envs_per_server": 2})
    try:
        obs, infos = envs.reset(seed=0)
        assert np.shares_memory(obs, ring_array(envs, "obs.0"))
        envs.send(np.zeros(2, np.int64))
        obs, reward, *_ = envs.recv()
        assert np.shares_memory(obs, ring_array(envs, "obs.0"))
        assert np.shares_memory(reward, ring_array(envs, "reward"))
    finally:
        envs.close()
    envs = portal_shm.make_vec("CartPole-v1", 4, vector_kwargs={**views, "envs_per_server": 1})
    try:
        _, infos = envs.reset(seed=0)
        envs.send(np.zeros(1, np.int64), [0])
        _, infos = envs.recv()[::4]
        assert infos["env_id"].tolist() == [2, 3]
        deadline = time.monotonic() + 30
        while envs._batches.queue.status[0] == STATUS_PENDING and time.monotonic() < deadline:
            time.sleep(0.001)  # let env 0 finish first, so that the next batch mixes two servers
        envs.send(np.zeros(2, np.int64), [2, 3])
        obs, reward, _, _, infos = envs.recv()
        ids = infos["env_id"].tolist()
        assert ids in ([0, 2], [0, 3])
        assert not np.shares_memory(obs, ring_array(envs, "obs.0"))
        assert np.array_equal(obs, ring_array(envs, "obs.0")[2, ids])
        assert np.array_equal(reward, ring_array(envs, "reward")[2, ids])
    finally:
        envs.close()


def test_env_ids_handed_out_are_read_only_and_name_what_send_steps():
    envs = portal_shm.make_vec("CartPole-v1", 4, vector_kwargs={"batch_size": 2, "envs_per_server": 2})
    try:
        _, infos = envs.reset(seed=0)
        ids = infos["env_id"]
        with pytest.raises(ValueError, match="read-only"):
            ids[0] = 3
        envs.send(np.zeros(2, np.int64), ids)  # the very array recv handed out
        assert envs.recv()[4]["env_id"].tolist() == [2, 3]  # the reset's second batch
        envs.send(np.zeros(2, np.int64), np.array([2, 3]))  # a new array: checked, mapped to its server
        seen = sorted(envs.recv()[4]["env_id"].tolist() + envs.recv()[4]["env_id"].tolist())
        assert seen == [0, 1, 2, 3]
    finally:
        envs.close()


def test_step_async_and_step_wait_answer_the_last_batch():
    envs = portal_shm.make_vec("CartPole-v1", 4, vector_kwargs={"batch_size": 2, "envs_per_server": 2})
    try:
        _, infos = envs.reset(seed=1)
        assert envs.observation_space.shape == (2, 4) and envs.action_space.shape == (2,)
        envs.step_async(np.ones(2, np.int64))
        with pytest.raises(AlreadyPendingCallError):
            envs.step_async(np.ones(2, np.int64))
        obs, reward, terminated, truncated, infos = envs.step_wait()
        assert infos["env_id"].tolist() == [2, 3]
        obs, reward, terminated, truncated, infos = envs.step(np.ones(2, np.int64))
        assert reward.tolist() == [1.0, 1.0] and len(infos["env_id"]) == 2
    finally:
        envs.close()


def test_bad_batches_are_refused_with_the_fix():
    with pytest.raises(ValueError, match="multiple of the envs per server"):
        portal_shm.make_vec("CartPole-v1", 4, vector_kwargs={"batch_size": 3, "envs_per_server": 2})
    with pytest.raises(ValueError, match="batch_size=0: give an integer from 1 to 4"):
        portal_shm.make_vec("CartPole-v1", 4, vector_kwargs={"batch_size": 0})
    with pytest.raises(ValueError, match="DISABLED"):
        portal_shm.make_vec("CartPole-v1", 4, vector_kwargs={"batch_size": 2, "autoreset_mode": "Disabled"})
    lockstep = portal_shm.make_vec("CartPole-v1", 2)
    try:
        with pytest.raises(PortalError, match="batch_size"):
            lockstep.recv()
    finally:
        lockstep.close()
    envs = portal_shm.make_vec("CartPole-v1", 4, vector_kwargs={"batch_size": 2, "envs_per_server": 2})
    try:
        envs.reset(seed=0)
        with pytest.raises(ValueError, match="only part of env server"):
            envs.send(np.zeros(1, np.int64), [0])
        with pytest.raises(ValueError, match="distinct env indices"):
            envs.send(np.zeros(2, np.int64), [0, 7])
        with pytest.raises(ValueError, match="expected shape"):
            envs.send(np.zeros(3, np.int64), [0, 1])
        envs.send(np.zeros(2, np.int64), [0, 1])
        with pytest.raises(AlreadyPendingCallError, match="recv"):
            envs.send(np.zeros(2, np.int64), [0, 1])
        envs.recv()
        envs.recv()
        with pytest.raises(NoAsyncCallError):
            envs.recv()
        with pytest.raises(ValueError, match="reset_mask"):
            envs.reset(options={"reset_mask": np.ones(4, np.bool_)})
    finally:
        envs.close()


def test_control_calls_and_spilled_infos_while_envs_are_stepping():
    """A call waits for stepping servers; their results (infos spilled to ZeroMQ) still arrive intact."""
    factory = lambda: gym.make("CartPole-v1", max_episode_steps=2)  # noqa: E731
    envs = portal_shm.make_vec(
        "CartPole-v1",
        4,
        max_episode_steps=2,
        vector_kwargs={"batch_size": 2, "envs_per_server": 1, "autoreset_mode": "SameStep", "info_capacity": 16},
    )
    expected_envs, resets = replicas(factory, 4, "SameStep", 5)
    try:
        expected = dict(enumerate(resets))
        obs, infos = envs.reset(seed=5)
        check_batch((obs, None, None, None, infos), expected)
        ids, spilled = infos["env_id"], 0
        for _ in range(8):
            actions = np.ones(2, np.int64)
            envs.send(actions, ids)
            for j, env_id in enumerate(ids.tolist()):
                expected[env_id] = expected_envs[env_id].step(actions[j : j + 1])
            assert envs.get_attr("metadata")[0]["render_fps"] == 50
            result = envs.recv()
            spilled += "final_obs" in result[4]
            check_batch(result, expected)
            ids = result[4]["env_id"]
        assert spilled
    finally:
        envs.close()
        for env in expected_envs:
            env.close()


def test_an_env_error_names_the_env_and_reset_recovers():
    envs = portal_shm.make_vec(
        "portal_shm.server.example_envs:FaultyEnv",
        4,
        fault="raise",
        phase="step",
        after=3,
        vector_kwargs={"batch_size": 2, "envs_per_server": 2},
    )
    try:
        _, infos = envs.reset(seed=0)
        with pytest.raises(EnvError, match="FaultyEnv failed in step") as error:
            for _ in range(10):
                envs.step(np.zeros(2, np.int64))
        assert error.value.env_index in (0, 1, 2, 3)
        obs, infos = envs.reset(seed=0)
        assert infos["env_id"].tolist() == [0, 1]
    finally:
        envs.close()


STATUS = MAILBOX_FIELDS.index("status")


def test_the_queue_needs_no_ring_from_a_failed_server():
    """Status words say who finished: a ring lost to a kill blocks nothing, a stray one wakes the
    agent for nothing and is then forgotten."""
    mailbox = np.zeros((2, len(MAILBOX_FIELDS)), np.int64)
    read, write = bell_pipe()
    bell, done = Bell(write), Waiter(read)  # a real doorbell pipe
    queue = ServerQueue(2, mailbox, AnyDone(lambda: [done]))
    queue.started(0)
    queue.started(1)
    mailbox[0, STATUS] = STATUS_OK  # killed after its status, before its ring
    mailbox[1, STATUS] = STATUS_OK
    bell.ring()
    queue.wait(2, None, lambda server: None, TimeoutError)
    assert queue.take(2) == [0, 1]

    queue = ServerQueue(2, mailbox, AnyDone(lambda: [done]))
    queue.started(0)

    def check(server):  # found hung and replaced, it rings as it is stopped: a ring of no server
        queue.stopped(server)
        bell.ring()

    queue.wait(1, None, check, TimeoutError)
    assert queue.take(1) == [0]
    queue.started(0)
    with pytest.raises(TimeoutError):  # the stray ring wakes the wait, which finds nothing finished
        queue.wait(1, time.monotonic() + 0.2, lambda server: None, TimeoutError)
    mailbox[0, STATUS] = STATUS_OK
    bell.ring()
    queue.wait(1, None, lambda server: None, TimeoutError)
    assert queue.take(1) == [0]
    bell.close()
    done.close()


def test_a_batch_size_that_forces_more_servers_than_cores_warns_with_a_layout_that_fits():
    from portal_shm.agent.contract.grouping import crowding_warning

    text = crowding_warning(num_envs=8, batch_size=3, envs_per_server=1, cores=2)
    assert "8 env servers share 2 CPU cores" in text and "batch_size=4 lets 2 servers hold 4 envs each" in text
    assert crowding_warning(num_envs=8, batch_size=4, envs_per_server=4, cores=2) is None
    assert crowding_warning(num_envs=16, batch_size=4, envs_per_server=4, cores=2) is None  # the batch's own size


def test_make_vec_says_which_layout_it_picked_for_an_awkward_batch_size(monkeypatch):
    import warnings

    monkeypatch.setattr("portal_shm.agent.contract.grouping.machine_cores", lambda: 2)
    with pytest.warns(UserWarning, match="batch_size=3 with num_envs=8") as caught:
        envs = portal_shm.make_vec("CartPole-v1", 8, vector_kwargs={"batch_size": 3})
    try:
        assert len(envs.servers) == 8 and "envs_per_server=D" in str(caught[0].message)
    finally:
        envs.close()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # an explicit layout is the user's choice: no warning
        envs = portal_shm.make_vec("CartPole-v1", 8, vector_kwargs={"batch_size": 3, "envs_per_server": 1})
        envs.close()
