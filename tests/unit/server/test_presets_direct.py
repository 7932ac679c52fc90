"""``AtariFrames`` plays the frames of a step on ale_py's emulator itself where it can
(``direct``): the same observations, rewards, flags and infos as stepping the wrapped ``AtariEnv``
frame by frame, in every mode of the preset (grayscale and RGB, lives ending episodes or not,
envpool's rules, the preset's step limit), and the frame-by-frame path still
serves envs it cannot see through."""

import gymnasium as gym
import numpy as np
import pytest

from portal_shm.server.presets import AtariFrames, atari

MODES = {
    "pong-grey": ("ALE/Pong-v5", {"max_episode_steps": 250}),
    "breakout-rgb-life-loss": ("ALE/Breakout-v5", {"grayscale": False, "terminal_on_life_loss": True, "stack": 2}),
    "breakout-envpool": (
        "ALE/Breakout-v5",
        {
            "episodic_life": True,
            "fire_reset": True,
            "reward_clip": True,
            "envpool_infos": True,
            "max_episode_steps": 300,
        },
    ),
    "skip-1": ("ALE/Pong-v5", {"frame_skip": 1, "stack": 1, "max_episode_steps": 300}),
}


def _frames(env):
    layer = env
    while not isinstance(layer, AtariFrames):
        layer = layer.env
    return layer


def _rollout(env, steps, seed):
    rng = np.random.default_rng(seed)
    records = [env.reset(seed=seed)]
    for _ in range(steps):
        obs, reward, terminated, truncated, info = env.step(int(rng.integers(env.action_space.n)))
        records.append((obs.copy(), reward, terminated, truncated, info))
        if terminated or truncated:
            records.append(env.reset())
    return records


@pytest.mark.parametrize("mode", sorted(MODES))
def test_direct_frames_equal_stepping_the_env_frame_by_frame(mode):
    pytest.importorskip("ale_py")
    env_id, kwargs = MODES[mode]
    direct, framewise = atari(env_id, **kwargs), atari(env_id, **kwargs)
    assert _frames(direct).direct
    _frames(framewise).direct = False
    try:
        got, expected = _rollout(direct, 700, 5), _rollout(framewise, 700, 5)
    finally:
        direct.close()
        framewise.close()
    assert len(got) == len(expected)
    assert len(got) > 702, "no episode ended: the end of a step was not compared"
    for index, (a, e) in enumerate(zip(got, expected)):
        assert len(a) == len(e), index
        assert np.array_equal(a[0], e[0]), f"record {index}: observations differ"
        assert a[1:] == e[1:] if len(a) == 2 else (a[1:4] == e[1:4] and a[4] == e[4]), (index, a[1:], e[1:])


def test_an_env_it_cannot_see_through_is_stepped_frame_by_frame():
    ale_py = pytest.importorskip("ale_py")
    gym.register_envs(ale_py)

    class Shaped(gym.Wrapper):
        def step(self, action):
            obs, reward, terminated, truncated, info = self.env.step(action)
            return obs, reward * 2, terminated, truncated, info

    plain = gym.make("ALE/Pong-v5", frameskip=1, obs_type="grayscale")
    wrapped = Shaped(gym.make("ALE/Pong-v5", frameskip=1, obs_type="grayscale"))
    skipping = gym.make("ALE/Pong-v5", frameskip=4, obs_type="grayscale")
    try:
        assert AtariFrames(plain).direct
        assert not AtariFrames(wrapped).direct  # its step would be bypassed
        with pytest.raises(ValueError):
            AtariFrames(gym.make("ALE/Pong-v5", frameskip=1, obs_type="ram"))
        assert not AtariFrames(skipping).direct  # ALE's own frame skip: every frame would not be seen
    finally:
        for env in (plain, wrapped, skipping):
            env.close()
