"""The API surface cleanrl's envpool PPO scripts rely on, driven through ``portal_shm.envpool``.

cleanrl's ``ppo_atari_envpool.py`` is not on the package index and CI has no GitHub access, so this
drives what it uses without it (``tests/compat/run_cleanrl_envpool.py`` runs the script itself):
``make(..., env_type="gym", episodic_life=True, reward_clip=True, seed=...)``, the spaces as
``gym.spaces`` classes (also through a ``gym.Wrapper``), ``single_*`` set as plain attributes, the
4-tuple, and the infos an episode-statistics wrapper reads (``reward`` unclipped, ``terminated`` at
the game's end, ``lives``) to report whole games while the learner sees one episode per life.
"""

import numpy as np
import pytest

pytestmark = pytest.mark.integration

pytest.importorskip("ale_py")
gym = pytest.importorskip(
    "gym", reason="gym is not installed (pip install gym==0.26.2): the gym type keeps gymnasium's spaces"
)

import portal_shm.envpool as envpool  # noqa: E402


class GameTotals(gym.Wrapper):
    """Adds each env's game return and length (``info["game_return"]``, ``info["game_length"]``) as
    they stand after a step: a game's totals on the step it ends, counted from ``info["reward"]``."""

    def reset(self, **kwargs):
        obs = self.env.reset(**kwargs)
        self.returns = np.zeros(self.env.num_envs, np.float64)
        self.lengths = np.zeros(self.env.num_envs, np.int64)
        return obs

    def step(self, action):
        obs, reward, done, info = self.env.step(action)
        self.returns += info["reward"]
        self.lengths += 1
        info["game_return"], info["game_length"] = self.returns.copy(), self.lengths.copy()
        game_over = info["terminated"].astype(bool)
        self.returns[game_over], self.lengths[game_over] = 0.0, 0
        return obs, reward, done, info


def test_a_cleanrl_style_loop_sees_gym_spaces_lives_and_whole_game_returns():
    num_envs = 4
    envs = envpool.make("Breakout-v5", env_type="gym", num_envs=num_envs, episodic_life=True, reward_clip=True, seed=1)
    envs.num_envs = num_envs  # what the script does before wrapping: plain attributes
    envs.single_action_space = envs.action_space
    envs.single_observation_space = envs.observation_space
    wrapped = GameTotals(envs)
    try:
        assert isinstance(wrapped.action_space, gym.spaces.Discrete) and wrapped.action_space.n == 4
        assert isinstance(wrapped.single_observation_space, gym.spaces.Box)
        obs_shape, action_shape = wrapped.single_observation_space.shape, wrapped.single_action_space.shape
        assert obs_shape == (4, 84, 84) and action_shape == ()
        rollout = np.zeros((128, num_envs) + obs_shape, np.float32)  # the script's storage, as arrays

        obs = wrapped.reset()
        assert obs.shape == (num_envs,) + obs_shape and obs.dtype == np.uint8
        rng = np.random.default_rng(0)
        own_returns, own_lengths = np.zeros(num_envs), np.zeros(num_envs, np.int64)
        lives_seen = [[] for _ in range(num_envs)]
        games = []
        for step in range(1200):
            rollout[step % 128] = obs
            action = rng.integers(0, wrapped.single_action_space.n, num_envs)
            obs, reward, done, info = wrapped.step(action)
            assert done.dtype == bool and reward.dtype == np.float32
            np.testing.assert_array_equal(reward, np.sign(info["reward"]))  # reward_clip: the learner's reward
            own_returns += info["reward"]
            own_lengths += 1
            for i in np.flatnonzero(done):
                lives_seen[i].append(int(info["lives"][i]))
                if info["lives"][i] == 0:  # the game is over: the statistics report it
                    assert info["terminated"][i] == 1
                    assert info["game_return"][i] == own_returns[i] and info["game_length"][i] == own_lengths[i]
                    assert lives_seen[i] == [4, 3, 2, 1, 0]  # one learner episode per life
                    games.append(float(info["game_return"][i]))
                    own_returns[i], own_lengths[i], lives_seen[i] = 0.0, 0, []
                else:  # a life lost: the learner's episode ends, the game (and its totals) go on
                    assert info["terminated"][i] == 0 and info["game_length"][i] == own_lengths[i]
            if len(games) >= 3:
                break
        assert len(games) >= 3, f"only {len(games)} games ended in {step + 1} steps of random play"
    finally:
        wrapped.close()
