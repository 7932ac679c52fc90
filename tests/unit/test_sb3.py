"""Stable-Baselines3 on a VectorPortal: the VecEnv contract, SB3's own VecEnv as reference, PPO learning."""

import gymnasium as gym
import numpy as np
import pytest

import portal_shm

pytest.importorskip("stable_baselines3")
torch = pytest.importorskip("torch")

from stable_baselines3 import PPO  # noqa: E402
from stable_baselines3.common.evaluation import evaluate_policy  # noqa: E402
from stable_baselines3.common.monitor import Monitor  # noqa: E402
from stable_baselines3.common.vec_env import DummyVecEnv, VecMonitor  # noqa: E402

from portal_shm.sb3 import SB3VecEnv, unbatch_infos, wrapper_names  # noqa: E402

SAME_STEP = {"autoreset_mode": "SameStep"}


@pytest.fixture
def cartpole():
    env = SB3VecEnv(portal_shm.make_vec("CartPole-v1", 4, vector_kwargs=SAME_STEP, max_episode_steps=20))
    yield env
    env.close()


def _actions(step: int) -> np.ndarray:
    """Envs 0 and 1 push one way (their poles fall within ~10 steps: terminated); envs 2 and 3
    alternate (they balance until the 20-step limit: truncated)."""
    return np.array([0, 1, step % 2, (step + 1) % 2])


@pytest.mark.parametrize("backing", ["portal", "gymnasium SyncVectorEnv"])
def test_same_results_as_sb3s_own_vec_env(cartpole, backing):
    make = [lambda: gym.make("CartPole-v1", max_episode_steps=20) for _ in range(4)]
    if backing != "portal":  # any SAME_STEP gymnasium vector env works (one without step_async too)
        cartpole.close()
        cartpole = SB3VecEnv(gym.vector.SyncVectorEnv(make, autoreset_mode=gym.vector.AutoresetMode.SAME_STEP))
    reference = DummyVecEnv(make)
    try:
        cartpole.seed(7)
        reference.seed(7)
        obs, expected = cartpole.reset(), reference.reset()
        np.testing.assert_array_equal(obs, expected)
        assert cartpole.reset_infos == reference.reset_infos
        ends = {"terminated": 0, "truncated": 0}
        for step in range(45):
            obs, rewards, dones, infos = cartpole.step(_actions(step))
            e_obs, e_rewards, e_dones, e_infos = reference.step(_actions(step))
            np.testing.assert_array_equal(obs, e_obs)
            np.testing.assert_array_equal(rewards, e_rewards)
            np.testing.assert_array_equal(dones, e_dones)
            assert rewards.dtype == e_rewards.dtype and dones.dtype == e_dones.dtype
            assert len(infos) == 4
            for info, e_info in zip(infos, e_infos):
                assert info.keys() == e_info.keys()
                assert info["TimeLimit.truncated"] == e_info["TimeLimit.truncated"]
                if "terminal_observation" in e_info:
                    np.testing.assert_array_equal(info["terminal_observation"], e_info["terminal_observation"])
                    ends["truncated" if e_info["TimeLimit.truncated"] else "terminated"] += 1
            assert cartpole.reset_infos == reference.reset_infos
        assert ends["terminated"] >= 4 and ends["truncated"] >= 2  # both kinds of episode end were compared
    finally:
        reference.close()
        cartpole.close()


def test_terminal_observation_is_a_copy_the_ring_cannot_overwrite(cartpole):
    cartpole.seed(0)
    cartpole.reset()
    kept = None
    for step in range(60):
        _, _, dones, infos = cartpole.step(_actions(step))
        if kept is None and dones[0]:
            kept = infos[0]["terminal_observation"]
            value = kept.copy()
    assert kept is not None and kept.flags.owndata and kept.flags.writeable
    np.testing.assert_array_equal(kept, value)


def test_observations_are_ring_views_unless_copy(cartpole):
    cartpole.seed(0)
    obs = cartpole.reset()
    assert not obs.flags.owndata  # a view of the shared-memory ring
    copying = SB3VecEnv(portal_shm.make_vec("CartPole-v1", 2, vector_kwargs=SAME_STEP), copy=True)
    try:
        assert copying.reset().flags.owndata
    finally:
        copying.close()


def test_vec_env_contract(cartpole):
    assert cartpole.num_envs == 4
    assert cartpole.observation_space == gym.make("CartPole-v1").observation_space
    assert cartpole.action_space == gym.spaces.Discrete(2)
    assert cartpole.render_mode is None
    obs = cartpole.reset()
    assert obs.shape == (4, 4) and all(cartpole.observation_space.contains(o) for o in obs)
    cartpole.action_space.seed(0)
    for _ in range(30):
        obs, rewards, dones, infos = cartpole.step(np.array([cartpole.action_space.sample() for _ in range(4)]))
        assert obs.shape == (4, 4) and rewards.shape == (4,) and dones.shape == (4,)
        assert rewards.dtype == np.float32 and dones.dtype == np.bool_
        assert isinstance(infos, list) and all(isinstance(info, dict) for info in infos)


def test_get_attr_set_attr_env_method(cartpole):
    assert cartpole.get_attr("gravity") == [9.8] * 4
    assert cartpole.get_attr("gravity", indices=[1, 3]) == [9.8, 9.8]
    cartpole.set_attr("gravity", 3.0, indices=[1, 2])
    assert cartpole.get_attr("gravity") == [9.8, 3.0, 3.0, 9.8]
    cartpole.set_attr("gravity", 5.0)
    assert cartpole.get_attr("gravity", indices=0) == [5.0]
    cartpole.seed(11)
    cartpole.reset()
    assert cartpole.env_method("get_wrapper_attr", "np_random_seed") == [11, 12, 13, 14]
    assert cartpole.env_method("get_wrapper_attr", "np_random_seed", indices=[2]) == [13]
    assert cartpole.has_attr("gravity") and not cartpole.has_attr("no_such_attribute")
    with pytest.raises(AttributeError, match="no_such_attribute"):
        cartpole.get_attr("no_such_attribute")


def test_env_is_wrapped_reads_the_remote_wrapper_chain(cartpole):
    assert cartpole.env_is_wrapped(gym.wrappers.TimeLimit) == [True] * 4
    assert cartpole.env_is_wrapped(Monitor, indices=[0]) == [False]
    assert wrapper_names("<Monitor<CartPoleEnv instance>>") == ["Monitor"]
    assert wrapper_names("<TimeLimit<OrderEnforcing<CartPoleEnv<CartPole-v1>>>>") == ["TimeLimit", "OrderEnforcing"]


def test_seed_and_options_reach_the_next_reset_only(cartpole):
    cartpole.seed(3)
    first = cartpole.reset().copy()
    second = cartpole.reset().copy()
    cartpole.seed(3)
    np.testing.assert_array_equal(cartpole.reset(), first)
    assert not np.array_equal(first, second)
    cartpole.set_options([{"low": -0.01, "high": 0.01}, {}, {}, {}])
    with pytest.raises(ValueError, match="one options dict"):
        cartpole.reset()
    cartpole.set_options({"low": -0.01, "high": 0.01})
    assert np.abs(cartpole.reset()).max() <= 0.01


def test_render_tiles_every_envs_frame():
    env = SB3VecEnv(portal_shm.make_vec("CartPole-v1", 2, vector_kwargs=SAME_STEP, render_mode="rgb_array"))
    try:
        env.reset()
        frames = env.get_images()
        assert len(frames) == 2 and frames[0].shape == (400, 600, 3)
        np.testing.assert_array_equal(env.render(), np.concatenate(frames))  # SB3 tiles 2 frames as 2 rows
    finally:
        env.close()


def test_next_step_portals_are_refused_with_the_fix():
    portal = portal_shm.make_vec("CartPole-v1", 1)
    try:
        with pytest.raises(ValueError, match="SameStep"):
            SB3VecEnv(portal)
    finally:
        portal.close()


def test_unbatch_infos_follows_the_masks():
    infos = {
        "a": np.array([1.5, 0.0]),
        "_a": np.array([True, False]),
        "episode": {"r": np.array([0.0, 3.0]), "_r": np.array([False, True])},
        "_episode": np.array([False, True]),
    }
    assert unbatch_infos(infos, 2) == [{"a": 1.5}, {"episode": {"r": 3.0}}]


def test_ppo_learns_cartpole_through_the_portal():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    env = VecMonitor(SB3VecEnv(portal_shm.make_vec("CartPole-v1", 8, vector_kwargs=SAME_STEP)))
    try:
        model = PPO(
            "MlpPolicy",
            env,
            n_steps=64,
            batch_size=256,
            n_epochs=10,
            learning_rate=1e-3,
            gamma=0.98,
            gae_lambda=0.8,
            ent_coef=0.0,
            seed=0,
            device="cpu",
        )
        model.learn(total_timesteps=20_000)
        env.seed(100)
        mean_return, _ = evaluate_policy(model, env, n_eval_episodes=16, deterministic=True)
    finally:
        env.close()
        torch.set_num_threads(threads)
    # A random policy averages ~22 on CartPole-v1; this seeded run reaches ~250 (~470 after 25k steps).
    assert mean_return > 150
