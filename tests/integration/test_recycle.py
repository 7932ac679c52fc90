"""Recycling: servers replaced by warm spares at episode ends, every transition unchanged.

Each recycled run is compared, record by record, with the same seeds and actions on a portal that
never recycles (less ``env_recycled`` in the infos): a step lost, repeated or altered by a swap
shows as a difference.
"""

import time

import gymnasium as gym
import numpy as np
import pytest

import portal_shm
from testkit.compare import assert_same, snapshot, without_recycled

pytestmark = pytest.mark.integration

LEAKY = "portal_shm.server.example_envs:LeakyEnv"
SLOWING = "portal_shm.server.example_envs:SlowingEnv"


def _run(envs, steps, seed, every=0):
    """Seeded random rollout: (records, env_recycled per step, the largest server RSS seen in MiB)."""
    envs.action_space.seed(seed)
    records = [snapshot(envs.reset(seed=seed))]
    recycled, rss = [], 0.0
    for t in range(steps):
        result = snapshot(envs.step(envs.action_space.sample()))
        infos = result[4]
        recycled.append(infos.pop("env_recycled", np.zeros(envs.num_envs, bool)) & infos.pop("_env_recycled", True))
        records.append(result)
        if every and t % every == 0:
            rss = max([rss] + [s["rss_mb"] or 0.0 for s in envs.stats()["servers"]])
    return records, np.array(recycled), rss


@pytest.mark.parametrize("mode", ["NextStep", "SameStep"])
def test_a_leaky_env_recycled_every_20_episodes_has_bounded_rss_and_every_transition_unchanged(mode):
    # 8 envs, 2 per server, about 400 episodes in all: each server is due every 20 of its episodes.
    vector = {"envs_per_server": 2, "autoreset_mode": mode}
    recycled_envs = portal_shm.make_vec(
        LEAKY, 8, leak_mb=5.0, step_ms=1.0, vector_kwargs={**vector, "recycle": {"episodes": 20}}
    )
    try:
        records, recycled, max_rss = _run(recycled_envs, 300, seed=3, every=5)
        stats = recycled_envs.stats()
        recycles = recycled_envs.recycles
    finally:
        recycled_envs.close()
    reference = portal_shm.make_vec(LEAKY, 8, leak_mb=0.0, vector_kwargs=vector)
    try:
        expected, never, _ = _run(reference, 300, seed=3)
    finally:
        reference.close()
    assert_same(records, expected)  # no transition lost, repeated or changed
    assert not never.any()
    episodes = sum(int(np.logical_or(r[2], r[3]).sum()) for r in expected[1:])
    assert episodes >= 400
    # every server was recycled several times, each env's swaps counted once in infos and stats
    assert min(recycles) >= 2, recycles
    assert list(recycled.sum(axis=0)) == recycles == [env["recycles"] for env in stats["envs"]]
    # without recycling a server would hold 5 MiB for each of its ~100 episodes
    leak_unrecycled = 5.0 * episodes / 4
    assert max_rss < 0.5 * leak_unrecycled, (max_rss, leak_unrecycled)


def test_a_slowing_env_is_recycled_by_the_slowdown_rule_and_goes_on_unchanged():
    vector = {"envs_per_server": 1}
    envs = portal_shm.make_vec(
        SLOWING, 2, step_ms=0.2, ramp_steps=200, vector_kwargs={**vector, "recycle": {"slowdown": 2.0}}
    )
    try:
        envs.action_space.seed(1)
        records = [snapshot(envs.reset(seed=1))]
        steps = 0
        while min(envs.recycles) < 1 and steps < 5000:
            records.append(snapshot(envs.step(envs.action_space.sample())))
            steps += 1
        assert min(envs.recycles) >= 1, f"not recycled within {steps} steps"
    finally:
        envs.close()
    without_recycled(records)
    reference = portal_shm.make_vec(LEAKY, 2, leak_mb=0.0, episode_length=20, vector_kwargs=vector)
    try:
        expected, _, _ = _run(reference, steps, seed=1)
    finally:
        reference.close()
    assert_same(records, expected)


def test_16_servers_due_together_are_never_recycled_more_than_2_in_one_step():
    envs = portal_shm.make_vec(
        LEAKY,
        16,
        leak_mb=0.0,
        step_ms=1.0,
        vector_kwargs={"envs_per_server": 1, "recycle": {"episodes": 8, "jitter": 0.1}},
    )
    try:
        envs.reset(seed=0)
        per_step = []
        for _ in range(3000):
            infos = envs.step(envs.action_space.sample())[4]
            per_step.append(int(infos.get("_env_recycled", np.zeros(16, bool)).sum()))
            # counted in the step whose infos say so, also when a server retired a step before
            assert sum(per_step) == sum(envs.recycles)
            if min(envs.recycles) >= 1:
                break
        assert min(envs.recycles) >= 1, envs.recycles
        assert max(per_step) <= 2
    finally:
        envs.close()


def _calls_between_steps(recycle: bool) -> tuple[list, int]:
    """Steps with a call, an attribute read or a reset after most: (records, steps after which a
    fresh server still owed the answer to its states, which what comes next must take first)."""
    vector = {"envs_per_server": 1, **({"recycle": {"episodes": 1}} if recycle else {})}
    envs = portal_shm.make_vec(LEAKY, 4, leak_mb=0.0, episode_length=3, vector_kwargs=vector)
    records, owing = [], 0
    try:
        envs.action_space.seed(5)
        records.append(snapshot(envs.reset(seed=5)))
        for t in range(150):
            result = snapshot(envs.step(envs.action_space.sample()))
            result[4].pop("env_recycled", None), result[4].pop("_env_recycled", None)
            records.append(result)
            if recycle and t == 5:
                time.sleep(3.0)  # the zygote of the first spares warms up (the steps come out the same)
            owing += any(server.owed is not None for server in envs._session.servers)
            if t % 3 == 0:
                records.append(envs.call("get_state"))
            elif t % 3 == 1:
                records.append(envs.get_attr("limit"))
            elif t % 30 == 2:
                records.append(snapshot(envs.reset(seed=t)))
    finally:
        envs.close()
    return records, owing


def test_calls_and_resets_between_steps_take_a_fresh_server_s_answer_first():
    # A retired server's spare gets its states without the agent waiting: the next command to it
    # (a step, a call, a reset) takes that answer first, and every result stays as without recycling.
    recycled, owing = _calls_between_steps(True)
    expected, _ = _calls_between_steps(False)
    assert owing >= 10, owing
    assert_same(recycled, expected)


def test_a_spare_that_dies_restoring_its_states_is_restarted_in_place_and_nothing_is_lost(tmp_path):
    token = tmp_path / "die-once"

    def run(recycle: bool) -> tuple[list, list, list]:
        vector = {"envs_per_server": 1, **({"recycle": {"episodes": 1}} if recycle else {})}
        envs = portal_shm.make_vec(
            "portal_shm.server.example_envs:DyingRestoreEnv",
            2,
            token_path=str(token),
            vector_kwargs={**vector, "on_env_failure": "restart"},
        )
        try:
            envs.action_space.seed(2)
            records = [snapshot(envs.reset(seed=2))]
            for t in range(200):
                result = snapshot(envs.step(envs.action_space.sample()))
                for key in ("env_recycled", "_env_recycled", "env_restarted", "_env_restarted"):
                    result[4].pop(key, None)
                records.append(result)
                if recycle and t == 5:
                    time.sleep(3.0)  # the zygote warms up
                    token.write_text("")  # the next spare's set_state exits its process
            return records, envs.recycles, envs.restart_log
        finally:
            envs.close()

    records, recycles, log = run(True)
    assert not token.exists(), "no spare restored a state"
    expected, _, _ = run(False)
    assert_same(records, expected)  # restarted in place, given the states again: nothing lost
    # a restart in place, ending no episode: logged, not counted in envs.restarts nor shown in the infos
    assert [(r["phase"], r["counted"], r["shown"]) for r in log] == [("recycle", False, None)], log
    assert min(recycles) >= 2, recycles


def test_recycle_is_refused_with_async_batches_and_checked_before_anything_starts():
    with pytest.raises(ValueError, match="recycle is for lockstep portals"):
        portal_shm.make_vec(LEAKY, 4, vector_kwargs={"batch_size": 2, "recycle": {"episodes": 5}})
    with pytest.raises(ValueError, match=r"recycle\['episodes'\] must be an integer >= 1"):
        portal_shm.make_vec(LEAKY, 2, vector_kwargs={"recycle": {"episodes": 0}})


def test_a_host_recycles_its_servers_locally_and_the_agent_sees_the_same_transitions(tmp_path):
    from testkit.hosts import EXAMPLE_ENVS, HostProcess, Keys

    keys = Keys(str(tmp_path))
    host = HostProcess(keys, *EXAMPLE_ENVS)
    vector = {"envs_per_server": 1}
    try:
        envs = portal_shm.make_vec(
            LEAKY,
            2,
            backend="remote",
            hosts=[host.address],
            **keys.options(),
            leak_mb=0.0,
            step_ms=2.0,
            vector_kwargs={**vector, "recycle": {"episodes": 3}},
        )
        try:
            records, recycled, _ = _run(envs, 250, seed=4)
            counted = [env["recycles"] for env in envs.stats()["envs"]]
            assert min(counted) >= 1 and list(recycled.sum(axis=0)) == counted
        finally:
            envs.close()
    finally:
        host.stop()
    assert host.process.returncode == 0, host.log
    reference = portal_shm.make_vec(LEAKY, 2, leak_mb=0.0, vector_kwargs=vector)
    try:
        expected, _, _ = _run(reference, 250, seed=4)
    finally:
        reference.close()
    assert_same(records, expected)


@pytest.mark.docker
def test_pong_in_containers_recycled_every_episode_matches_sync_vector_env():
    from testkit.docker_images import docker_or_skip, ensure_image

    client = docker_or_skip()
    image = ensure_image(client, "ale", "portal-shm/ale")
    ale_py = pytest.importorskip("ale_py")
    gym.register_envs(ale_py)
    expected_envs = gym.vector.SyncVectorEnv([lambda: gym.make("ALE/Pong-v5", max_episode_steps=30)] * 2)
    envs = portal_shm.make_vec(
        "ALE/Pong-v5",
        2,
        backend="docker",
        image=image,
        max_episode_steps=30,
        vector_kwargs={"envs_per_server": 1, "recycle": {"episodes": 1}},
    )
    try:
        records, recycled, _ = _run(envs, 400, seed=2)
        assert recycled.sum() >= 2 and list(recycled.sum(axis=0)) == envs.recycles
    finally:
        envs.close()
    try:
        expected, _, _ = _run(expected_envs, 400, seed=2)
    finally:
        expected_envs.close()
    assert_same(records, expected)
