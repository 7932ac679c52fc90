"""Env-side training presets: exact area resizing, Atari preprocessing, ViZDoom screens, through a portal."""

import re

import numpy as np
import pytest

import portal_shm
from portal_shm import presets


@pytest.mark.parametrize(
    "source, target, channels",
    [
        ((210, 160), (84, 84), None),  # fractional footprints on both axes
        ((120, 160), (60, 80), None),  # whole factors
        ((120, 160), (60, 80), 3),
        ((7, 5), (3, 2), None),
    ],
)
def test_area_resize_is_the_exact_area_average(source, target, channels):
    frame = np.random.default_rng(0).integers(0, 256, source + ((channels,) if channels else ()), dtype=np.uint8)
    rows, cols = presets.area_weights(source[0], target[0]), presets.area_weights(source[1], target[1])
    assert np.allclose(rows.sum(axis=1), 1) and np.allclose(cols.sum(axis=1), 1)
    exact = np.einsum("oh,hw...,vw->ov...", rows.astype(np.float64), frame.astype(np.float64), cols.astype(np.float64))
    out = presets.AreaResize(source, target)(frame)
    assert out.dtype == np.uint8 and out.shape == exact.shape
    assert np.abs(out.astype(np.float64) - exact).max() <= 0.5 + 1e-3  # rounding only


def test_area_resize_of_a_flat_frame_is_flat():
    out = presets.AreaResize((210, 160), (84, 84))(np.full((210, 160), 77, np.uint8))
    assert (out == 77).all()


def test_atari_preset_preprocesses_inside_the_env():
    pytest.importorskip("ale_py")
    env = presets.atari("ALE/Pong-v5", noop_max=0)
    try:
        assert env.observation_space.shape == (4, 84, 84) and env.observation_space.dtype == np.uint8
        obs, _ = env.reset(seed=0)
        ale = env.unwrapped.ale
        start = ale.getEpisodeFrameNumber()
        obs, reward, terminated, truncated, _ = env.step(0)
        assert ale.getEpisodeFrameNumber() - start == 4  # one agent step = 4 emulator frames
        assert obs.shape == (4, 84, 84) and env.observation_space.contains(obs)
        assert not np.array_equal(obs[-1], np.zeros((84, 84), np.uint8))
    finally:
        env.close()


def test_atari_preset_through_a_portal_equals_the_local_env():
    pytest.importorskip("ale_py")
    envs = portal_shm.make_vec(
        "portal_shm.presets:atari", 2, env_id="ALE/Pong-v5", vector_kwargs={"autoreset_mode": "SameStep"}
    )
    local = [presets.atari("ALE/Pong-v5") for _ in range(2)]
    try:
        assert envs.single_observation_space.shape == (4, 84, 84)
        obs, _ = envs.reset(seed=5)
        expected = [env.reset(seed=5 + i)[0] for i, env in enumerate(local)]
        np.testing.assert_array_equal(obs, np.stack(expected))
        for step in range(20):
            actions = np.array([step % 6, (step + 3) % 6])
            obs, rewards, *_ = envs.step(actions)
            expected = [env.step(int(a))[0] for env, a in zip(local, actions)]
            np.testing.assert_array_equal(obs, np.stack(expected))
    finally:
        envs.close()
        for env in local:
            env.close()


def test_vizdoom_preset_gives_small_stacked_screens():
    pytest.importorskip("vizdoom")
    env = presets.vizdoom("VizdoomBasic-v1", size=(60, 80))
    try:
        assert env.observation_space.shape == (4, 60, 80)
        obs, _ = env.reset(seed=0)
        obs, reward, *_ = env.step(0)
        assert obs.shape == (4, 60, 80) and obs.dtype == np.uint8
        assert reward == -4.0  # living reward -1 per tic, 4 tics per step
    finally:
        env.close()
    rgb = presets.vizdoom("VizdoomBasic-v1", grayscale=False, stack=2)
    try:
        assert rgb.observation_space.shape == (2, 3, 60, 80)
        assert rgb.reset(seed=0)[0].shape == (2, 3, 60, 80)
    finally:
        rgb.close()


# -- envpool's Atari semantics, each checked against ALE's own counters ------------------------------


def _play(env, steps, seed=0, action=None):
    """Random (or fixed) actions for ``steps`` agent steps, resetting after each episode; yields
    ``(terminated, truncated, info, ale.lives(), ale.getEpisodeFrameNumber())`` per step."""
    rng = np.random.default_rng(seed)
    ale = env.unwrapped.ale
    env.reset(seed=seed)
    for _ in range(steps):
        a = int(rng.integers(env.action_space.n)) if action is None else action
        obs, reward, terminated, truncated, info = env.step(a)
        yield obs, reward, terminated, truncated, info, ale.lives(), ale.getEpisodeFrameNumber()
        if terminated or truncated:
            env.reset()


def test_episodic_life_ends_the_episode_at_a_lost_life_and_continues_the_game():
    pytest.importorskip("ale_py")
    env = presets.atari("ALE/Breakout-v5", episodic_life=True, fire_reset=True, repeat_action_probability=0.0)
    try:
        ale = env.unwrapped.ale
        env.reset(seed=1)
        lives_seen, game_overs = [ale.lives()], 0
        rng = np.random.default_rng(1)
        for _ in range(3000):
            before = ale.lives()
            obs, _, terminated, truncated, info = env.step(int(rng.integers(4)))
            assert info["lives"] == ale.lives()  # ALE's own counter
            if not terminated:
                continue
            if ale.game_over():
                assert ale.lives() == 0 and lives_seen == [5, 4, 3, 2, 1]  # every life was an episode
                game_overs += 1
                lives_seen = []
            else:
                assert ale.lives() == before - 1 > 0  # a life lost, the game not over
                frame = ale.getEpisodeFrameNumber()
                continued, _ = env.reset()
                assert env.env.continued and ale.getEpisodeFrameNumber() > frame  # the same game goes on
                np.testing.assert_array_equal(continued[:-1], obs[1:])  # the frame stack too, as envpool's
                lives_seen.append(ale.lives())
                continue
            first, _ = env.reset()
            assert not env.env.continued and ale.lives() == 5  # a game over restarts the game
            assert all((frame == first[0]).all() for frame in first)  # with a fresh stack
            lives_seen.append(ale.lives())
            if game_overs == 2:
                break
        assert game_overs == 2
    finally:
        env.close()


def test_terminal_on_life_loss_still_restarts_the_game():
    pytest.importorskip("ale_py")
    env = presets.atari("ALE/Breakout-v5", terminal_on_life_loss=True, fire_reset=True, repeat_action_probability=0.0)
    try:
        for _, _, terminated, _, _, lives, _ in _play(env, 400):
            if terminated:
                assert lives == 4  # one life lost, then the reset below gives all five back
                env.reset()
                assert env.unwrapped.ale.lives() == 5
                break
        else:
            pytest.fail("no life lost in 400 random steps")
    finally:
        env.close()


def test_reward_clip_returns_the_sign_and_the_raw_reward_in_infos():
    pytest.importorskip("ale_py")
    clipped = presets.atari("ALE/SpaceInvaders-v5", reward_clip=True, repeat_action_probability=0.0)
    raw = presets.atari("ALE/SpaceInvaders-v5", repeat_action_probability=0.0)
    try:
        seen = set()
        for (_, reward, _, _, info, *_), (_, raw_reward, *_) in zip(_play(clipped, 300), _play(raw, 300)):
            assert info["reward"] == raw_reward and reward == np.sign(raw_reward)
            seen.add(raw_reward)
        assert max(seen) > 1  # aliens are worth 5 to 30 points: the clip did something
    finally:
        clipped.close()
        raw.close()


@pytest.mark.parametrize("fire_reset", [True, False])
def test_fire_reset_launches_breakouts_ball(fire_reset):
    pytest.importorskip("ale_py")
    env = presets.atari("ALE/Breakout-v5", fire_reset=fire_reset, noop_max=0, repeat_action_probability=0.0)
    try:
        assert env.unwrapped.get_action_meanings()[1] == "FIRE"
        lives = [lives for *_, lives, _ in _play(env, 200, action=0)]  # NOOP only: only FIRE serves the ball
        assert (min(lives) < 5) is fire_reset
    finally:
        env.close()


def test_noop_starts_draw_between_noop_min_and_noop_max_frames():
    pytest.importorskip("ale_py")
    env = presets.atari("ALE/Pong-v5", noop_min=1, noop_max=30, repeat_action_probability=0.0)
    try:
        frames = []
        for seed in range(12):
            env.reset(seed=seed)
            frames.append(env.unwrapped.ale.getEpisodeFrameNumber())  # one emulator frame per no-op
        assert all(1 <= f <= 30 for f in frames) and len(set(frames)) > 3
        fire = presets.atari("ALE/Breakout-v5", noop_min=1, noop_max=1, fire_reset=True)
        fire.reset(seed=0)
        assert fire.unwrapped.ale.getEpisodeFrameNumber() == 1  # FIRE took the one no-op's place
        fire.close()
    finally:
        env.close()


def test_max_episode_steps_truncates_a_game_across_its_lives():
    pytest.importorskip("ale_py")
    env = presets.atari("ALE/Breakout-v5", episodic_life=True, max_episode_steps=60, envpool_infos=True)
    try:
        steps, lives_lost = 0, 0
        for _, _, terminated, truncated, info, *_ in _play(env, 200, action=1):
            steps += 1
            assert info["elapsed_step"] == steps  # counted across lives, reset only with the game
            assert set(info) == {"lives", "reward", "terminated", "elapsed_step"}
            if truncated:
                assert steps == 60 and not terminated and lives_lost >= 1
                break
            if terminated:  # a lost life (_play resets, and the game goes on)
                assert info["terminated"] == 0 and info["lives"] > 0
                lives_lost += 1
        else:
            pytest.fail("not truncated after 60 steps")
        env.reset()
        assert env.unwrapped.ale.lives() == 5  # the truncated game was restarted
    finally:
        env.close()


def test_stack_frames_gives_what_frame_stack_observation_gives():
    pytest.importorskip("ale_py")
    from gymnasium.wrappers import FrameStackObservation

    ours = presets.atari("ALE/Pong-v5")
    theirs = FrameStackObservation(presets.atari("ALE/Pong-v5", stack=1), 4)
    try:
        assert ours.observation_space == theirs.observation_space
        np.testing.assert_array_equal(ours.reset(seed=3)[0], theirs.reset(seed=3)[0])
        for step in range(300):
            a, b = ours.step(step % 6), theirs.step(step % 6)
            np.testing.assert_array_equal(a[0], b[0])
            assert a[1:4] == b[1:4]
            if a[2] or a[3]:
                np.testing.assert_array_equal(ours.reset()[0], theirs.reset()[0])
    finally:
        ours.close()
        theirs.close()


def test_rgb_frames_are_channels_first():
    pytest.importorskip("ale_py")
    env = presets.atari("ALE/Pong-v5", grayscale=False, screen_size=(96, 72), stack=2)
    try:
        assert env.observation_space.shape == (2, 3, 96, 72)
        obs, _ = env.reset(seed=0)
        assert obs.shape == (2, 3, 96, 72) and env.observation_space.contains(obs)
    finally:
        env.close()


@pytest.mark.parametrize(
    "preset, kwargs, text",
    [
        (presets.atari, {"stack": 0}, "stack=0: give an integer of at least 1"),
        (presets.atari, {"stack": 2.5}, "stack=2.5: give an integer"),
        (presets.atari, {"frame_skip": True}, "frame_skip=True: give an integer"),
        (presets.atari, {"noop_max": -1}, "noop_max=-1: give an integer of at least 0"),
        (presets.atari, {"screen_size": (84, 0)}, "screen_size=(84, 0): give a positive integer or a pair"),
        (presets.atari, {"screen_size": (1, 2, 3)}, "give a positive integer or a pair"),
        (presets.vizdoom, {"size": 84}, "size=84: give the frame's (height, width)"),
        (presets.vizdoom, {"stack": -4}, "stack=-4: give an integer of at least 1"),
    ],
)
def test_presets_check_their_sizes_before_building_anything(preset, kwargs, text):
    with pytest.raises(ValueError, match=re.escape(text)):
        preset(**kwargs)


@pytest.mark.parametrize(
    "source, target, channels",
    [((120, 160), (60, 80), ()), ((120, 160), (60, 80), (3,)), ((240, 320), (60, 80), (3,)), ((64, 64), (32, 16), ())],
)
def test_power_of_two_blocks_give_the_bytes_of_the_general_area_average(source, target, channels):
    from portal_shm.server.presets import AreaResize

    frames = np.random.default_rng(5).integers(0, 256, (20, *source, *channels), dtype=np.uint8)
    fast, general = AreaResize(source, target), AreaResize(source, target)
    assert fast.blocks is not None
    general.blocks = None  # the taps path every other size takes
    for frame in list(frames) + [
        np.full((*source, *channels), 255, np.uint8),
        np.zeros((*source, *channels), np.uint8),
    ]:
        np.testing.assert_array_equal(fast(frame), general(frame))
    assert AreaResize((210, 160), (84, 84)).blocks is None
    assert AreaResize((120, 160), (40, 80)).blocks is None  # 3 rows per pixel: not a power of two
