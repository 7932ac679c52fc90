"""The VectorPortal behaves as a gymnasium VectorEnv: API, state machine, views, errors."""

import gymnasium as gym
import numpy as np
import pytest

import portal_shm
from portal_shm.agent.contract.kept_views import KeptViewWarning


@pytest.fixture
def cartpole():
    envs = portal_shm.make_vec("CartPole-v1", 3)
    yield envs
    envs.close()


def test_call_get_attr_set_attr(cartpole):
    cartpole.reset(seed=0)
    assert cartpole.get_attr("gravity") == (9.8, 9.8, 9.8)
    cartpole.set_attr("gravity", [1.0, 2.0, 3.0])
    assert cartpole.get_attr("gravity") == (1.0, 2.0, 3.0)
    cartpole.set_attr("gravity", 5.0)
    assert cartpole.call("np_random_seed") == (0, 1, 2)
    assert cartpole.get_attr("gravity") == (5.0, 5.0, 5.0)
    with pytest.raises(ValueError, match="length equal"):
        cartpole.set_attr("gravity", [1.0])


def test_unsendable_call_result_is_a_clear_error(cartpole):
    with pytest.raises(portal_shm.EnvError, match="cannot be sent to the agent"):
        cartpole.get_attr("np_random")


def test_a_reward_that_is_not_a_number_is_an_env_error_of_its_env():
    envs = portal_shm.make_vec(
        "portal_shm.server.example_envs:FaultyEnv", 4, fault="bad_reward", after=1, vector_kwargs={"envs_per_server": 4}
    )
    try:
        envs.reset(seed=0)
        _, reward, *_ = envs.step(np.zeros(4, np.int64))
        assert reward.tolist() == [1.0] * 4
        with pytest.raises(portal_shm.EnvError, match="lots") as error:
            envs.step(np.zeros(4, np.int64))
        assert error.value.env_index == 0 and error.value.phase == "step"
    finally:
        envs.close()


def test_views_stay_valid_for_ring_depth_minus_one_calls():
    envs = portal_shm.make_vec(
        "portal_shm.server.example_envs:NestedEnv", 2, vector_kwargs={"ring_depth": 3, "copy": False}
    )
    try:
        first, _ = envs.reset(seed=0)
        kept = first["image"].copy()
        for _ in range(2):
            envs.step(envs.action_space.sample())
        assert np.array_equal(first["image"], kept)
        with pytest.warns(KeptViewWarning, match="ring_depth - 1 = 2 further calls"):
            envs.step(envs.action_space.sample())
        assert not np.array_equal(first["image"], kept)  # the slot was reused on the third call
    finally:
        envs.close()


def test_copy_true_returns_fresh_arrays():
    envs = portal_shm.make_vec("CartPole-v1", 2, vector_kwargs={"copy": True, "ring_depth": 2})
    try:
        first, _ = envs.reset(seed=0)
        kept = first.copy()
        for _ in range(3):
            envs.step(np.ones(2, np.int64))
        assert np.array_equal(first, kept)
    finally:
        envs.close()


def test_zero_copy_step_returns_the_same_view_objects():
    envs = portal_shm.make_vec("CartPole-v1", 2, vector_kwargs={"ring_depth": 2, "copy": False})
    try:
        envs.reset(seed=0)
        a = envs.step(np.zeros(2, np.int64))[0]
        envs.step(np.zeros(2, np.int64))
        with pytest.warns(KeptViewWarning):  # ``a`` is still held when its slot is written again
            b = envs.step(np.zeros(2, np.int64))[0]
        assert a is b and not a.flags.owndata
    finally:
        envs.close()


def test_bad_actions_are_rejected_with_the_expected_shape(cartpole):
    cartpole.reset(seed=0)
    with pytest.raises(ValueError, match=r"expected shape \(3,\)"):
        cartpole.step(np.zeros(2, np.int64))
    cartpole.step(np.zeros(3, np.int64))


def test_disabled_mode_refuses_to_step_a_finished_env():
    envs = portal_shm.make_vec("CartPole-v1", 1, max_episode_steps=2, vector_kwargs={"autoreset_mode": "Disabled"})
    try:
        envs.reset(seed=0)
        envs.step(np.zeros(1, np.int64))
        _, _, _, truncated, _ = envs.step(np.zeros(1, np.int64))
        assert truncated[0]
        with pytest.raises(portal_shm.EnvError, match="reset_mask"):
            envs.step(np.zeros(1, np.int64))
        envs.reset(options={"reset_mask": np.array([True])})
        envs.step(np.zeros(1, np.int64))
    finally:
        envs.close()


def test_reset_mask_is_validated(cartpole):
    with pytest.raises(ValueError, match="at least one True"):
        cartpole.reset(options={"reset_mask": np.zeros(3, np.bool_)})
    with pytest.raises(TypeError, match="dtype=np.bool_"):
        cartpole.reset(options={"reset_mask": np.zeros(3, np.int64)})


def test_unknown_backend_names_the_choices():
    with pytest.raises(portal_shm.PortalError, match="available: .*process"):
        portal_shm.make_vec("CartPole-v1", 1, backend="nope")


def test_other_interpreter_and_missing_interpreter(tmp_path):
    import sys

    envs = portal_shm.make_vec("CartPole-v1", 1, python=sys.executable)
    envs.close()
    with pytest.raises(portal_shm.PortalError, match="/no/such/python"):
        portal_shm.make_vec("CartPole-v1", 1, python="/no/such/python")


def test_protocol_mismatch_names_both_versions(tmp_path):
    import sys

    fake = tmp_path / "python-v99"
    fake.write_text(
        "#!/bin/sh\nexec %s -c 'import portal_shm.wire.protocol as p; p.PROTOCOL_VERSION = 99; "
        "from portal_shm.server import main; main()'\n" % sys.executable
    )
    fake.chmod(0o755)
    with pytest.raises(
        portal_shm.errors.ProtocolMismatchError,
        match=r"runs portal-shm-env [\d.]+, protocol 99; this agent runs portal-shm [\d.]+, protocol 1: install portal-shm-env==",
    ):
        portal_shm.make_vec("CartPole-v1", 1, python=str(fake))


def test_legacy_gym_api_env_is_adapted():
    envs = portal_shm.make_vec("portal_shm.server.example_envs:LegacyCounterEnv", 2, limit=3)
    try:
        obs, infos = envs.reset(seed=[1, 2])
        assert infos == {}
        expected = [np.random.RandomState(s).randint(0, 10) for s in (1, 2)]
        assert obs[:, 0].tolist() == expected
        for _ in range(2):
            obs, reward, terminated, truncated, infos = envs.step(np.array([2, 0]))
        obs, reward, terminated, truncated, infos = envs.step(np.array([2, 0]))
        assert reward.tolist() == [2.0, 0.0]
        assert truncated.tolist() == [expected[0] + 6 < 12, True]
        assert terminated.tolist() == [expected[0] + 6 >= 12, False]
        assert infos["TimeLimit.truncated"][1]
    finally:
        envs.close()


def test_make_returns_a_single_gymnasium_env():
    from gymnasium.utils.env_checker import check_env

    env = portal_shm.make("CartPole-v1")
    try:
        assert isinstance(env, gym.Env)
        obs, info = env.reset(seed=3)
        expected_obs, _ = gym.make("CartPole-v1").reset(seed=3)
        assert np.array_equal(obs, expected_obs)
        obs, reward, terminated, truncated, info = env.step(1)
        assert isinstance(reward, float) and isinstance(terminated, bool)
        check_env(env, skip_render_check=True)
    finally:
        env.close()


def test_stable_baselines3_ppo_trains_on_a_portal():
    sb3 = pytest.importorskip("stable_baselines3")
    env = portal_shm.make("CartPole-v1")
    try:
        model = sb3.PPO("MlpPolicy", env, n_steps=64, batch_size=32, n_epochs=1, seed=0, device="cpu")
        model.learn(total_timesteps=128)
        action, _ = model.predict(env.reset(seed=0)[0])
        assert env.action_space.contains(int(action))
    finally:
        env.close()


def test_spaces_that_need_a_ring_past_max_ring_bytes_are_refused_before_it_is_made():
    """A hostile env declares a 4096x4096 frame (its bounds are broadcast views): with
    ``max_ring_bytes`` the portal refuses before the ring (or gymnasium's spaces) are made, and
    leaves no server behind."""

    def children() -> set:
        import os

        found = set()
        for task in os.listdir("/proc/self/task"):
            with open(f"/proc/self/task/{task}/children") as handle:
                found |= {int(pid) for pid in handle.read().split()}
        return found

    before = children()
    with pytest.raises(
        portal_shm.PortalError, match=r"need a ring of 134,\d{3},\d{3} bytes .* max_ring_bytes=1,048,576"
    ):
        portal_shm.make_vec(
            "portal_shm.server.example_envs:HugeSpaceEnv", 2, side=4096, vector_kwargs={"max_ring_bytes": 1 << 20}
        )
    assert children() <= before
    envs = portal_shm.make_vec(
        "portal_shm.server.example_envs:HugeSpaceEnv", 2, side=64, vector_kwargs={"max_ring_bytes": 1 << 20}
    )
    try:
        assert envs.reset(seed=0)[0].shape == (2, 64, 64)
    finally:
        envs.close()
