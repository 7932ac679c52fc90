"""A VectorPortal returns exactly what gymnasium's SyncVectorEnv returns, in every autoreset mode, for
spaces and infos beyond CartPole's (CartPole on every portal kind: ``tests/contract``)."""

import gymnasium as gym
import pytest

import portal_shm
from portal_shm.server.example_envs import NestedEnv
from testkit.compare import assert_same, rollout

MODES = ["NextStep", "SameStep", "Disabled"]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("envs_per_server", [1, 2])
def test_nested_spaces_and_sparse_infos_match(mode, envs_per_server):
    expected_envs = gym.vector.SyncVectorEnv([NestedEnv] * 4, autoreset_mode=mode)
    envs = portal_shm.make_vec(
        "portal_shm.server.example_envs:NestedEnv",
        4,
        vector_kwargs={"autoreset_mode": mode, "envs_per_server": envs_per_server},
    )
    try:
        assert envs.observation_space == expected_envs.observation_space
        assert envs.single_action_space == expected_envs.single_action_space
        assert_same(rollout(envs, 60, seed=3, mode=mode), rollout(expected_envs, 60, seed=3, mode=mode))
    finally:
        envs.close()
        expected_envs.close()


def test_reset_options_and_seed_lists_match():
    expected_envs = gym.vector.SyncVectorEnv([NestedEnv] * 3)
    envs = portal_shm.make_vec("portal_shm.server.example_envs:NestedEnv", 3)
    try:
        for kwargs in ({"seed": [4, 7, 9], "options": {"note": "hi"}}, {"seed": 2}):
            assert_same(envs.reset(**kwargs), expected_envs.reset(**kwargs))
    finally:
        envs.close()
        expected_envs.close()


def test_final_obs_travels_even_when_larger_than_the_info_slot():
    expected_envs = gym.vector.SyncVectorEnv(
        [lambda: gym.make("CartPole-v1", max_episode_steps=5)] * 2, autoreset_mode="SameStep"
    )
    envs = portal_shm.make_vec(
        "CartPole-v1", 2, max_episode_steps=5, vector_kwargs={"autoreset_mode": "SameStep", "info_capacity": 16}
    )
    try:
        assert_same(rollout(envs, 12, seed=0, mode="SameStep"), rollout(expected_envs, 12, seed=0, mode="SameStep"))
    finally:
        envs.close()
        expected_envs.close()


@pytest.mark.parametrize("mode", MODES)
def test_variable_layout_text_leaf_matches(mode):
    from portal_shm.server.example_envs import TextObsEnv

    expected_envs = gym.vector.SyncVectorEnv([TextObsEnv] * 3, autoreset_mode=mode)
    envs = portal_shm.make_vec("portal_shm.server.example_envs:TextObsEnv", 3, vector_kwargs={"autoreset_mode": mode})
    try:
        assert envs.observation_space == expected_envs.observation_space
        assert_same(rollout(envs, 20, seed=5, mode=mode), rollout(expected_envs, 20, seed=5, mode=mode))
    finally:
        envs.close()
        expected_envs.close()
