"""Recycling plain envs (no ``get_state``, no adapter): their state at an episode's end is their
generators, so a server swapped there gives exactly the transitions of gymnasium's SyncVectorEnv.

Each recycled run is compared record by record with SyncVectorEnv on the same seeds and actions
(less ``env_recycled`` in the infos). ``testkit.plain_envs.plain_walk`` draws from ``np_random``,
a ``random.Random`` of the base env, and a wrapper's own numpy and ``random`` generators.
"""

import os
import signal
import time
import warnings

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode

import portal_shm
from portal_shm.agent.recycle.recycler import recycle_seed
from testkit.compare import assert_same, snapshot
from testkit.plain_envs import opaque_walk, plain_walk

pytestmark = pytest.mark.integration

WALK = "testkit.plain_envs:plain_walk"
OPAQUE = "testkit.plain_envs:opaque_walk"
MAKES = {WALK: plain_walk, "CartPole-v1": lambda: gym.make("CartPole-v1")}
FLAGS = ("env_recycled", "_env_recycled", "env_restarted", "_env_restarted")


def _run(envs, steps, seed, mode, between=None):
    """Seeded random rollout (Disabled: ended envs reset by mask); ``between(t, envs)`` after each
    step. Returns the records less the recycling and restart flags, and the steps' env_recycled."""
    envs.action_space.seed(seed)
    records, recycled = [snapshot(envs.reset(seed=seed))], []
    for t in range(steps):
        result = snapshot(envs.step(envs.action_space.sample()))
        infos = result[4]
        recycled.append(infos.get("env_recycled", np.zeros(envs.num_envs, bool)) & infos.get("_env_recycled", True))
        for key in FLAGS:
            infos.pop(key, None)
        records.append(result)
        done = np.logical_or(result[2], result[3])
        if mode == "Disabled" and done.any():
            records.append(snapshot(envs.reset(options={"reset_mask": done})))
        if between is not None:
            between(t, envs)
    return records, np.array(recycled)


def _expected(env_id, n, steps, seed, mode):
    reference = gym.vector.SyncVectorEnv([MAKES[env_id]] * n, autoreset_mode=AutoresetMode(mode))
    try:
        return _run(reference, steps, seed, mode)[0]
    finally:
        reference.close()


def _let_spares_start(t, envs):
    """A pause after steps while a spare is starting (a zygote warming up, a fork): swaps then
    come within the run, and the steps come out the same whatever the pauses."""
    if any(not spare.ready for spare in envs._session.spares.values()):
        time.sleep(0.01)


@pytest.mark.parametrize(
    "env_id, mode",
    [(WALK, "NextStep"), (WALK, "SameStep"), (WALK, "Disabled"), ("CartPole-v1", "NextStep")],
    ids=["walk-NextStep", "walk-SameStep", "walk-Disabled", "CartPole-NextStep"],
)
def test_plain_envs_recycled_every_5_episodes_give_sync_vector_env_s_transitions(env_id, mode):
    steps = 400 if env_id == WALK else 700
    vector = {"envs_per_server": 1, "autoreset_mode": mode, "recycle": {"episodes": 5}}
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # no "trajectories differ" warning: nothing to warn of
        envs = portal_shm.make_vec(env_id, 4, vector_kwargs=vector)
        try:
            records, recycled = _run(envs, steps, 11, mode, _let_spares_start)
            recycles = envs.recycles
        finally:
            envs.close()
    assert_same(records, _expected(env_id, 4, steps, 11, mode))
    assert min(recycles) >= 2, recycles
    assert list(recycled.sum(axis=0)) == recycles


@pytest.mark.parametrize("mode", ["NextStep", "SameStep"])
def test_plain_envs_sharing_a_server_are_swapped_only_when_all_end_together_never_mid_episode(mode):
    # Past wait_steps a server of envs with complete states goes mid-episode; these have none
    # there, so it waits for a step where both its envs end (said once), and nothing changes.
    vector = {"envs_per_server": 2, "autoreset_mode": mode, "recycle": {"episodes": 4, "wait_steps": 3}}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        envs = portal_shm.make_vec(WALK, 4, vector_kwargs=vector)
        try:
            records, recycled = _run(envs, 600, 2, mode, _let_spares_start)
            recycles = envs.recycles
        finally:
            envs.close()
    assert_same(records, _expected(WALK, 4, 600, 2, mode))
    assert min(recycles) >= 1 and list(recycled.sum(axis=0)) == recycles, recycles
    messages = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    assert len(messages) == 1 and "swapped once they do" in messages[0] and "envs_per_server=1" in messages[0]


@pytest.mark.parametrize("mode", ["NextStep", "SameStep"])
def test_a_plain_env_s_fresh_server_that_dies_after_the_old_one_closed_is_restarted_in_place_exactly(mode):
    """A spare standing by is killed; at its swap (the old server already told to close) it is
    found dead, started cold in place and given the envs' episode-end states: nothing changes."""
    killed = []

    def kill_a_ready_spare(t, envs):
        _let_spares_start(t, envs)
        for spare in list(envs._session.spares.values()):
            if spare.ready and not killed:
                killed.append(spare.handle.host_pid())
                os.kill(killed[-1], signal.SIGKILL)

    vector = {
        "envs_per_server": 1,
        "autoreset_mode": mode,
        "recycle": {"episodes": 5},
        "on_env_failure": "restart",
        "step_timeout": 30,
    }
    envs = portal_shm.make_vec(WALK, 2, vector_kwargs=vector)
    try:
        records, _ = _run(envs, 400, 5, mode, kill_a_ready_spare)
        recycles, restarts, log = envs.recycles, envs.restarts, envs.restart_log
    finally:
        envs.close()
    assert killed
    assert_same(records, _expected(WALK, 2, 400, 5, mode))
    # restarted in place: logged, not counted in envs.restarts nor shown in the infos
    assert [(r["phase"], r["counted"], r["shown"]) for r in log] == [("recycle", False, None)], log
    assert restarts == [0, 0] and min(recycles) >= 2, (restarts, recycles)


def test_envs_whose_state_cannot_be_taken_are_reset_with_recycle_seed_in_next_step_and_left_alone_otherwise():
    # A wrapper holding an iterator: no state even at an episode's end.
    envs = portal_shm.make_vec(OPAQUE, 2, vector_kwargs={"envs_per_server": 1, "recycle": {"episodes": 1}})
    checked = 0
    try:
        envs.reset(seed=10)
        with pytest.warns(RuntimeWarning, match=r"recycle_seed.*Tally\.counter"):
            for _ in range(3000):
                obs, reward, terminated, truncated, infos = envs.step(envs.action_space.sample())
                for i in np.flatnonzero(infos.get("_env_recycled", np.zeros(2, bool))):
                    expected, _ = opaque_walk().reset(seed=recycle_seed(10 + i, envs.recycles[i]))
                    assert np.array_equal(obs[i], expected) and reward[i] == 0.0
                    assert not terminated[i] and not truncated[i]
                    checked += 1
                if checked >= 3:
                    break
                time.sleep(0.001)
        assert checked >= 3
    finally:
        envs.close()
    envs = portal_shm.make_vec(OPAQUE, 2, vector_kwargs={"autoreset_mode": "SameStep", "recycle": {"episodes": 1}})
    try:
        envs.reset(seed=10)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            deadline = time.monotonic() + 60
            while not caught and time.monotonic() < deadline:  # until a spare is ready at an episode end
                envs.step(envs.action_space.sample())
                time.sleep(0.001)
        assert "not recycled with autoreset_mode SameStep" in str(caught[0].message)
        assert "Tally.counter" in str(caught[0].message)
        for _ in range(200):
            envs.step(envs.action_space.sample())
        assert envs.recycles == [0, 0]
    finally:
        envs.close()


def test_a_host_recycles_plain_envs_locally_and_the_agent_sees_sync_vector_env_s_transitions(tmp_path):
    from testkit.hosts import HostProcess, Keys

    keys = Keys(str(tmp_path))
    host = HostProcess(keys, "--entry-points", "testkit.plain_envs:*")
    try:
        envs = portal_shm.make_vec(
            WALK,
            2,
            backend="remote",
            hosts=[host.address],
            **keys.options(),
            vector_kwargs={"envs_per_server": 1, "recycle": {"episodes": 3}},
        )
        try:
            records, recycled = _run(envs, 300, 4, "NextStep", lambda t, envs: time.sleep(0.005))
            counted = [env["recycles"] for env in envs.stats()["envs"]]
        finally:
            envs.close()
    finally:
        host.stop()
    assert host.process.returncode == 0, host.log
    assert_same(records, _expected(WALK, 2, 300, 4, "NextStep"))
    assert min(counted) >= 2 and list(recycled.sum(axis=0)) == counted, counted
