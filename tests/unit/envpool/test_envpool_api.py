"""``portal_shm.envpool``: envpool's ``make`` and API over real ALE envs in env servers.

Checked here: envpool's spaces (one env's), its infos and their dtypes, env_id conventions of
send/recv, the gym 4-tuple, episodic life and reward clipping as envpool scripts read them, the
refusal of every option that does not apply, and, where envpool itself is installed, step-for-step
equality with it.
"""

import numpy as np
import pytest

pytest.importorskip("ale_py")

import portal_shm.envpool as envpool  # noqa: E402

INFO_DTYPES = {"env_id": np.int32, "lives": np.int32, "reward": np.float32, "terminated": np.int32}
INFO_DTYPES["elapsed_step"] = np.int32


def check_info(info, ids):
    assert list(info)[:2] == ["env_id", "players"]
    for key, dtype in INFO_DTYPES.items():
        assert info[key].dtype == dtype and info[key].shape == (len(ids),), key
    np.testing.assert_array_equal(info["env_id"], ids)
    np.testing.assert_array_equal(info["players"]["env_id"], ids)


def test_gymnasium_type_gives_envpools_spaces_results_and_infos():
    envs = envpool.make("Pong-v5", env_type="gymnasium", num_envs=2)
    try:
        assert envs.action_space == envs.single_action_space and envs.action_space.n == 6  # one env's space
        assert envs.observation_space.shape == (4, 84, 84) and envs.observation_space.dtype == np.uint8
        assert envs.spec.config.num_envs == 2 and envs.config["batch_size"] == 2 and len(envs) == 2
        assert envs.config["repeat_action_probability"] == 0.0 and envs.config["use_fire_reset"]
        obs, info = envs.reset()
        assert obs.shape == (2, 4, 84, 84) and obs.dtype == np.uint8
        check_info(info, [0, 1])
        assert (info["elapsed_step"] == 0).all()
        obs, reward, terminated, truncated, info = envs.step(np.array([0, 1], dtype=np.int32))
        assert reward.dtype == np.float32 and terminated.dtype == truncated.dtype == bool
        check_info(info, [0, 1])
        assert (info["elapsed_step"] == 1).all()
        envs.single_action_space = envs.action_space  # what envpool scripts do: plain attributes
    finally:
        envs.close()


def test_gym_type_gives_the_4_tuple_and_observations_from_reset():
    envs = envpool.make_gym("Pong-v5", num_envs=2)
    try:
        obs = envs.reset()
        assert isinstance(obs, np.ndarray) and obs.shape == (2, 4, 84, 84)
        obs, reward, done, info = envs.step(np.zeros(2, dtype=np.int64))
        assert done.dtype == bool and info["TimeLimit.truncated"].dtype == bool
        check_info(info, [0, 1])
    finally:
        envs.close()
    with_info = envpool.make_gym("Pong-v5", num_envs=1, gym_reset_return_info=True)
    try:
        obs, info = with_info.reset()
        check_info(info, [0])
    finally:
        with_info.close()


def test_async_batches_follow_envpools_env_id_conventions():
    envs = envpool.make("Pong-v5", num_envs=4, batch_size=2, seed=7)
    try:
        assert envs.is_async
        envs.async_reset()
        seen = set()
        for _ in range(6):
            obs, reward, terminated, truncated, info = envs.recv()
            assert obs.shape == (2, 4, 84, 84)
            check_info(info, info["env_id"])
            seen.update(info["env_id"].tolist())
            envs.send(np.zeros(2, dtype=np.int32), info["env_id"])
        assert seen == {0, 1, 2, 3}
        envs.recv()
        with pytest.raises(ValueError, match="must name every env"):
            envs.reset(env_id=np.array([0, 1]))
    finally:
        envs.close()


def test_lockstep_send_takes_env_ids_in_any_order():
    envs = envpool.make("Pong-v5", num_envs=2, seed=3)
    reference = envpool.make("Pong-v5", num_envs=2, seed=3)
    try:
        envs.reset(), reference.reset()
        envs.send(np.array([3, 0]), np.array([1, 0], dtype=np.int32))  # env 1 gets 3, env 0 gets 0
        a = envs.recv()
        b = reference.step(np.array([0, 3]))
        np.testing.assert_array_equal(a[0], b[0])
        ids = a[-1]["env_id"]  # handed back as it came (cleanrl): taken as every env in order
        with pytest.raises(ValueError, match="read-only"):
            ids[0] = 1  # (so it cannot name other envs than it says)
        envs.send(np.array([2, 5]), ids)
        np.testing.assert_array_equal(envs.recv()[0], reference.step(np.array([2, 5]))[0])
    finally:
        envs.close()
        reference.close()


def test_episodic_life_and_reward_clip_as_envpool_scripts_read_them():
    envs = envpool.make("Breakout-v5", env_type="gym", num_envs=2, episodic_life=True, reward_clip=True, seed=1)
    try:
        envs.reset()
        rng = np.random.default_rng(1)
        lives = [[5], [5]]
        games_over = 0
        for _ in range(1500):
            obs, reward, done, info = envs.step(rng.integers(0, 4, 2))
            np.testing.assert_array_equal(reward, np.sign(info["reward"]))
            for i in np.flatnonzero(done):
                if info["lives"][i] == 0:  # the real game over: cleanrl logs the game's return here
                    assert info["terminated"][i] == 1 and lives[i] == [5, 4, 3, 2, 1]
                    games_over += 1
                    lives[i] = []
                else:  # a lost life ended the learner's episode, the game goes on
                    assert info["terminated"][i] == 0 and info["lives"][i] == lives[i][-1] - 1
                    lives[i].append(int(info["lives"][i]))
            for i in np.flatnonzero(~done):
                if not lives[i]:
                    lives[i] = [int(info["lives"][i])]  # the first step of a new game
            if games_over >= 2:
                break
        assert games_over >= 2
    finally:
        envs.close()


@pytest.mark.parametrize(
    "options, error, match",
    [
        ({"episodic_lives": True}, TypeError, "unknown options \\['episodic_lives'\\]"),
        ({"zero_discount_on_life_loss": True}, ValueError, "zero_discount_on_life_loss=True"),
        ({"thread_affinity_offset": 0}, ValueError, "thread_affinity_offset=0"),
        ({"use_inter_area_resize": False}, ValueError, "use_inter_area_resize=False"),
        ({"max_num_players": 2}, ValueError, "max_num_players=2"),
        ({"base_path": "/x"}, ValueError, "base_path="),
        ({"noop_max": 0}, ValueError, "noop_max >= 1"),
        ({"num_threads": 3, "num_envs": 4, "gray_scale": False}, ValueError, "num_threads=3"),
        ({"env_type": "dm"}, ValueError, "env_type='dm'"),
        ({"env_type": "jax"}, ValueError, "env_type='jax'"),
        ({"gym_reset_return_info": False}, ValueError, "gym_reset_return_info=False"),
    ],
)
def test_options_that_do_not_apply_are_refused_by_name(options, error, match):
    with pytest.raises(error, match=match):
        envpool.make("Pong-v5", **options)


@pytest.mark.parametrize(
    "task_id, match",
    [("Ant-v5", "MuJoCo task 'Ant-v5'"), ("CartPole-v1", "not mapped"), ("D3Battle-v1", "no scenario")],
)
def test_tasks_without_a_counterpart_are_refused(task_id, match):
    with pytest.raises(ValueError, match=match):
        envpool.make(task_id)


def test_xla_and_seed_are_refused_with_what_to_use():
    envs = envpool.make("Pong-v5")
    try:
        with pytest.raises(RuntimeError, match="envs.send/envs.recv"):
            envs.xla()
        with pytest.raises(RuntimeError, match="pass seed="):
            envs.seed(1)
    finally:
        envs.close()


def test_vizdoom_tasks_stack_rgb_frames_as_envpool():
    pytest.importorskip("vizdoom")
    envs = envpool.make("Basic-v1", num_envs=1, img_height=60, img_width=80)
    try:
        assert envs.observation_space.shape == (12, 60, 80)
        obs, info = envs.reset()
        assert obs.shape == (1, 12, 60, 80) and info["elapsed_step"].tolist() == [0]
        obs, *_, info = envs.step(np.zeros(1, dtype=np.int64))
        assert info["elapsed_step"].tolist() == [1]
    finally:
        envs.close()
    with pytest.raises(ValueError, match="reward_config"):
        envpool.make("Basic-v1", reward_config={})


def test_the_same_steps_as_envpool_itself():
    """Where envpool installs: without no-op randomness the two give the same rewards, flags, lives
    and infos step for step, and frames within one grey level (resizing's rounding)."""
    real = pytest.importorskip("envpool")
    options = dict(num_envs=2, noop_max=1, episodic_life=True, reward_clip=True, seed=3)
    ours, theirs = envpool.make("Breakout-v5", **options), real.make("Breakout-v5", env_type="gymnasium", **options)
    try:
        assert ours.observation_space == theirs.observation_space and ours.action_space == theirs.action_space
        a, b = ours.reset(), theirs.reset()
        assert np.abs(a[0].astype(int) - b[0]).max() <= 1
        rng = np.random.default_rng(0)
        for _ in range(300):
            actions = rng.integers(0, 4, 2)
            a, b = ours.step(actions), theirs.step(actions)
            assert np.abs(a[0].astype(int) - b[0]).max() <= 1
            for x, y in zip(a[1:4], b[1:4]):
                np.testing.assert_array_equal(x, y)
            for key in INFO_DTYPES:
                np.testing.assert_array_equal(a[4][key], b[4][key])
                assert a[4][key].dtype == b[4][key].dtype
    finally:
        ours.close()
        theirs.close()
