"""``MultiAgentPortal.flat(group)``: one group's agents as the envs of a gymnasium VectorEnv (parameter
sharing), and its SB3 VecEnv: the rows equal PettingZoo's own loop, masked rows follow the dead-agent
contract, per-row calls reach the row's env."""

import numpy as np
import pytest
from mpe2 import simple_spread_v3

import portal_shm
from portal_shm.multi_agent import FlatAgents

SPREAD = "mpe2.simple_spread_v3:parallel_env"
LEAVING = "portal_shm.server.example_envs:LeavingAgentsEnv"


@pytest.mark.parametrize("dead_obs", ["zeros", "last"])
def test_flat_mpe_equals_pettingzoos_loop_with_same_step_autoreset(dead_obs):
    """3 envs x 3 agents = 9 rows; 10-step episodes, so 22 steps cross two autoresets. At the time limit
    the rows are truncated, ``final_obs`` is each agent's real last observation (whatever ``dead_obs``
    says, as SuperSuit's vector envs give it) and the row already holds the next episode's first one."""
    num_envs, seed, cycles = 3, 5, 10
    envs = portal_shm.make_vec_ma(
        SPREAD,
        num_envs,
        dead_obs=dead_obs,
        env_kwargs={"max_cycles": cycles},
        vector_kwargs={"autoreset_mode": "SameStep"},
    )
    flat = envs.flat()
    games = [simple_spread_v3.parallel_env(max_cycles=cycles) for _ in range(num_envs)]
    agents = games[0].possible_agents

    def rows(per_env):
        return np.stack([per_env[e][a] for e in range(num_envs) for a in agents])

    try:
        assert isinstance(flat, FlatAgents) and flat.num_envs == num_envs * 3
        assert flat.single_observation_space == games[0].observation_space("agent_0")
        assert flat.single_action_space == games[0].action_space("agent_0")
        obs, infos = flat.reset(seed=seed)
        np.testing.assert_array_equal(obs, rows([g.reset(seed=seed + e)[0] for e, g in enumerate(games)]))
        assert infos["agent_mask"].all() and infos["env_id"].tolist() == [0, 0, 0, 1, 1, 1, 2, 2, 2]
        rng = np.random.default_rng(seed)
        for t in range(1, 23):
            actions = rng.integers(0, 5, flat.num_envs)
            obs, reward, terminated, truncated, infos = flat.step(actions)
            steps = [g.step({a: actions[e * 3 + j] for j, a in enumerate(agents)}) for e, g in enumerate(games)]
            np.testing.assert_array_equal(reward, rows([s[1] for s in steps]))
            assert not terminated.any()
            if t % cycles:
                assert not truncated.any() and "final_obs" not in infos
                np.testing.assert_array_equal(obs, rows([s[0] for s in steps]))
            else:
                assert truncated.all() and infos["_final_obs"].all()
                np.testing.assert_array_equal(np.stack(infos["final_obs"]), rows([s[0] for s in steps]))
                np.testing.assert_array_equal(obs, rows([g.reset()[0] for g in games]))
            assert infos["agent_mask"].all()
    finally:
        flat.close()
        for game in games:
            game.close()


def test_masked_rows_of_a_leaving_agent_get_reward_0_and_their_actions_never_reach_the_env():
    """Agent a_1 terminates on step 10 and is back on step 20 (``LeavingAgentsEnv``, which raises on an
    action for an absent agent): its row ends once, then is a masked row until it returns."""
    flat = portal_shm.make_vec_ma(LEAVING, 2, vector_kwargs={"autoreset_mode": "SameStep"}).flat("a")
    leaver = [1, 4]
    try:
        flat.reset(seed=0)
        for t in range(1, 30):
            obs, reward, terminated, truncated, infos = flat.step(np.full(flat.num_envs, 2))
            mask = infos["agent_mask"]
            if t == 10:
                assert terminated[leaver].all() and not mask[leaver].any() and (reward[leaver] == 3).all()
                final = np.stack(infos["final_obs"][leaver])
                assert (final[:, 0] == 10).all() and (final[:, 1] == 1).all()  # its real last observation
                np.testing.assert_array_equal(final, obs[leaver])  # which its row holds on this call
                assert infos["_final_obs"].tolist() == [False, True, False, False, True, False]
            elif 10 < t < 20:
                assert not mask[leaver].any() and (reward[leaver] == 0).all() and (obs[leaver] == 0).all()
                assert not terminated.any() and "final_obs" not in infos
            else:
                assert mask.all() and not terminated.any()
            assert infos["returned"][leaver].all() == (t == 20) and not infos["returned"][[0, 2, 3, 5]].any()
        assert [len(seen) for seen in flat.envs.portal.get_attr("seen")] == [29, 29]
        assert flat.get_attr_envs([5, 0, 1], "leaver") == ("a_1", "a_1", "a_1")
    finally:
        flat.close()


def test_sb3_vec_env_over_the_flat_view_has_one_env_per_agent():
    sb3 = pytest.importorskip("portal_shm.sb3")
    vec = sb3.flat_agents_vec_env(SPREAD, 2, env_kwargs={"max_cycles": 4})
    try:
        assert vec.num_envs == 6 and vec.observation_space.shape == (18,)
        obs = vec.reset()
        assert obs.shape == (6, 18)
        for t in range(1, 5):
            obs, rewards, dones, infos = vec.step(np.zeros(6, np.int64))
        assert dones.all() and all(info["TimeLimit.truncated"] for info in infos)
        assert [info["env_id"] for info in infos] == [0, 0, 0, 1, 1, 1]  # the ended step's infos
        assert not any(info["agent_mask"] for info in infos) and all(info["agent_mask"] for info in vec.reset_infos)
        final = np.stack([info["terminal_observation"] for info in infos])
        assert final.shape == (6, 18) and not (final == 0).all(axis=1).any()  # the real ones
        assert vec.venv.envs.dead_obs == "zeros"  # make_vec_ma's default, as in every other view
        assert not np.array_equal(final, obs)  # obs: the next episode's first
        assert vec.env_method("__repr__", indices=[0, 2])[0] == vec.env_method("__repr__", indices=[1])[0]
    finally:
        vec.close()


def test_bad_flat_views_name_the_fix():
    adversary = portal_shm.make_vec_ma("mpe2.simple_adversary_v3:parallel_env", 1)
    try:
        with pytest.raises(ValueError, match="name the one to flatten"):
            adversary.flat()
        with pytest.raises(ValueError, match="pass others="):
            adversary.flat("agent")
        flat = adversary.flat("agent", others=lambda result: {"adversary": np.zeros(1, np.int64)})
        flat.reset(seed=0)
        assert flat.step(np.zeros(2, np.int64))[1].shape == (2,)
    finally:
        adversary.close()
    batched = portal_shm.make_vec_ma(SPREAD, 2, vector_kwargs={"batch_size": 1})
    try:
        with pytest.raises(ValueError, match="without batch_size"):
            batched.flat()
    finally:
        batched.close()
