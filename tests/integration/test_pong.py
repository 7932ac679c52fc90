"""ALE/Pong-v5 through a VectorPortal equals gymnasium's SyncVectorEnv, frame for frame."""

import gymnasium as gym
import pytest

import portal_shm
from testkit.compare import assert_same, rollout

pytestmark = pytest.mark.integration

ale_py = pytest.importorskip("ale_py")
gym.register_envs(ale_py)


@pytest.mark.parametrize("mode", ["NextStep", "SameStep", "Disabled"])
def test_pong_matches_sync_vector_env(mode):
    kwargs = {"max_episode_steps": 40}
    expected_envs = gym.vector.SyncVectorEnv([lambda: gym.make("ALE/Pong-v5", **kwargs)] * 4, autoreset_mode=mode)
    envs = portal_shm.make_vec("ALE/Pong-v5", 4, vector_kwargs={"autoreset_mode": mode}, **kwargs)
    try:
        assert envs.single_observation_space == expected_envs.single_observation_space
        assert envs.single_action_space == expected_envs.single_action_space
        assert_same(rollout(envs, 100, seed=7, mode=mode), rollout(expected_envs, 100, seed=7, mode=mode))
    finally:
        envs.close()
        expected_envs.close()


def test_pong_render_matches():
    expected = gym.vector.SyncVectorEnv([lambda: gym.make("ALE/Pong-v5", render_mode="rgb_array")] * 2)
    envs = portal_shm.make_vec("ALE/Pong-v5", 2, render_mode="rgb_array")
    try:
        envs.reset(seed=1)
        expected.reset(seed=1)
        assert envs.render_mode == "rgb_array"
        assert_same(envs.render(), expected.render())
    finally:
        envs.close()
        expected.close()
