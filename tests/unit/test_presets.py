"""Env-side training presets: exact area resizing, Atari preprocessing, ViZDoom screens, through a portal."""

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
