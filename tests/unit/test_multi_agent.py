"""Multi-agent envs through ``make_vec_ma``: equal to PettingZoo's own loops, the dead-agent contract,
turn-based envs in async batches, the 2-player adapter and the errors for bad input."""

import numpy as np
import pettingzoo
import pytest
from mpe2 import simple_adversary_v3

import portal_shm
from portal_shm.server import multi_agent
from portal_shm.server.envs import EnvNotFound
from portal_shm.server.example_envs import LeavingAgentsEnv, MatchingPenniesEnv
from portal_shm.server.multi_agent.groups import Group
from testkit.multi_agent_replay import ParallelReplay, actions_of, aec_games

MPE = "mpe2.simple_adversary_v3:parallel_env"
TICTACTOE = "classic/tictactoe-v3"  # an id of PettingZoo's registry
LEAVING = "portal_shm.server.example_envs:LeavingAgentsEnv"


def ring_views(envs):
    return list(envs.portal._session.ring.views.values())


def check_rows(result, expected, envs, env_ids):
    """Every row of every group equals the replay's row for its (env, agent)."""
    for name, batch in result.groups.items():
        for row, (env, agent) in enumerate(envs.batch_agent_ids(name, env_ids)):
            want = expected[env][agent]
            where = f"{name} row {row} (env {env}, {agent})"
            np.testing.assert_array_equal(batch.obs[row], want["obs"], err_msg=where)
            assert batch.obs.dtype == want["obs"].dtype
            assert batch.reward[row] == want["reward"], where
            assert (batch.terminated[row], batch.truncated[row], batch.mask[row]) == (
                want["terminated"],
                want["truncated"],
                want["mask"],
            ), where


@pytest.mark.parametrize("mode", ["NextStep", "SameStep"])
def test_mpe_parallel_env_in_8_servers_equals_8_in_process_envs(mode):
    """simple_adversary has two groups (1 adversary, 2 agents of other spaces) and 25-step episodes:
    80 steps are three episodes, autoreset between them."""
    num_envs, seed = 8, 7
    envs = portal_shm.make_vec_ma(
        MPE, num_envs, vector_kwargs={"autoreset_mode": mode, "envs_per_server": 1, "copy": False}
    )
    replays = [ParallelReplay(simple_adversary_v3.parallel_env(), seed + i, mode) for i in range(num_envs)]
    try:
        assert {name: group.agents for name, group in envs.groups.items()} == {
            "adversary": ("adversary_0",),
            "agent": ("agent_0", "agent_1"),
        }
        assert envs.groups["agent"].observation_space == replays[0].env.observation_space("agent_0")
        assert envs.agent_ids["agent"][:3] == [(0, "agent_0"), (0, "agent_1"), (1, "agent_0")]
        result = envs.reset(seed=seed)
        starts = [replay.reset() for replay in replays]
        check_rows(result, [rows for rows, _, _ in starts], envs, range(num_envs))
        assert result.groups["agent"].obs.shape == (num_envs * 2, 10)
        rng = np.random.default_rng(seed)
        episodes = 0
        for _ in range(80):
            actions = {name: rng.integers(0, 5, num_envs * group.size) for name, group in envs.groups.items()}
            result = envs.step(actions)
            expected = []
            for i, replay in enumerate(replays):
                rows, terminated, truncated = replay.step(actions_of(envs, actions, i))
                expected.append(rows)
                assert (result.terminated[i], result.truncated[i]) == (terminated, truncated)
            check_rows(result, expected, envs, range(num_envs))
            episodes += int(result.truncated.sum())
            for batch in result.groups.values():  # the rows are reshaped ring views, not copies
                assert any(np.shares_memory(batch.obs, view) for view in ring_views(envs))
                assert any(np.shares_memory(batch.mask, view) for view in ring_views(envs))
        assert episodes == 3 * num_envs
    finally:
        envs.close()
        for replay in replays:
            replay.env.close()


@pytest.mark.parametrize("dead_obs", ["zeros", "last"])
def test_an_agent_that_leaves_and_comes_back_follows_the_dead_agent_contract(dead_obs):
    """Agent a_1 terminates on step 10 and is back from step 20; everyone is truncated at 30."""
    num_envs, k, leaver = 2, 3, 1
    envs = portal_shm.make_vec_ma(LEAVING, num_envs, dead_obs=dead_obs)
    try:
        result = envs.reset(seed=3)
        rows = [e * k + leaver for e in range(num_envs)]
        others = [r for r in range(num_envs * k) if r not in rows]
        for t in range(1, 32):
            actions = {"a": np.full(num_envs * k, 2)}  # masked rows too: the env must never see theirs
            result = envs.step(actions)
            batch = result.groups["a"]
            obs, reward = batch.obs[rows], batch.reward[rows]
            if t < 10 or 20 < t < 30:
                assert batch.mask[rows].all() and not batch.terminated[rows].any()
                assert (reward == 2 + leaver).all() and (obs[:, 0] == t).all()
            elif t == 10:  # it ends: its last reward, terminated exactly now, mask 0
                assert not batch.mask[rows].any() and batch.terminated[rows].all() and not batch.truncated.any()
                assert (reward == 2 + leaver).all()
            elif t < 20:
                assert not batch.mask[rows].any() and not batch.terminated[rows].any() and (reward == 0).all()
            if t == 10:  # its real last observation on the call it ends, whatever dead_obs says
                assert (obs[:, 0] == 10).all() and (obs[:, 1] == leaver).all()
            elif 10 < t < 20:
                assert (obs == 0).all() if dead_obs == "zeros" else (obs[:, 0] == 10).all()
            if t == 20:  # back: mask 1, a fresh observation, no reward for the step it missed, the flag
                assert batch.mask[rows].all() and (reward == 0).all() and (obs[:, 0] == 20).all()
                assert batch.returned[rows].all() and not batch.returned[others].any()
                assert result.infos["agents"]["a_1"]["back"].all()
            else:
                assert not batch.returned.any()
            if t == 30:  # everyone truncated: the env's episode ends, truncated
                assert batch.truncated.all() and not batch.mask.any() and not batch.terminated.any()
                assert result.truncated.all() and not result.terminated.any()
            elif t == 31:  # NextStep autoreset: a new episode, everyone back
                assert batch.mask.all() and (batch.reward == 0).all() and (batch.obs[:, 0] == 0).all()
            else:
                assert not result.truncated.any() and not result.terminated.any()
                assert batch.mask[others].all() and (batch.reward[others] == 2 + np.tile([0, 2], num_envs)).all()
        for seen in envs.portal.get_attr("seen"):  # the env raises on such an action; its record shows none
            assert len(seen) == 30
            assert [t + 1 for t, actions in enumerate(seen) if "a_1" not in actions] == list(range(11, 21))
            assert all(set(actions) <= {"a_0", "a_1", "a_2"} for actions in seen)
    finally:
        envs.close()


@pytest.mark.parametrize("mode", ["NextStep", "SameStep"])
def test_tictactoe_in_async_batches_equals_pettingzoos_own_loop(mode):
    """16 games in batches of 8 from 4 servers: each batch holds 8 different envs with one agent to
    act each (none in an env whose game just ended, NextStep); two whole games per env equal
    PettingZoo's AEC loop replayed with the same seeds and actions."""
    num_envs, batch_size, seed, games = 16, 8, 5, 2
    envs = portal_shm.make_vec_ma(
        TICTACTOE,
        num_envs,
        api="aec",
        vector_kwargs={"batch_size": batch_size, "envs_per_server": 4, "autoreset_mode": mode},
    )
    rngs = [np.random.default_rng(100 + e) for e in range(num_envs)]

    def chooser(e):
        return lambda agent, mask: int(rngs[e].choice(np.flatnonzero(mask)))

    played = [[([], {})] for _ in range(num_envs)]
    try:
        assert envs.kind == "aec" and envs.groups["player"].agents == ("player_1", "player_2")
        result = envs.reset(seed=seed)
        while min(len(g) for g in played) <= games:
            ids = result.infos["env_id"]
            assert len(set(ids.tolist())) == batch_size
            batch = result.groups["player"]
            actions = np.zeros(batch_size * 2, np.int64)
            for j, e in enumerate(ids.tolist()):
                rows = slice(2 * j, 2 * j + 2)
                decisions, finals = played[e][-1]
                for r, agent in enumerate(("player_1", "player_2")):
                    if batch.terminated[rows][r] or batch.truncated[rows][r]:
                        finals[agent] = (
                            float(batch.reward[rows][r]),
                            bool(batch.terminated[rows][r]),
                            bool(batch.truncated[rows][r]),
                        )
                ended = bool(result.terminated[j] or result.truncated[j])
                if ended:
                    played[e].append(([], {}))
                acting = np.flatnonzero(batch.mask[rows])
                assert len(acting) == (0 if ended and mode == "NextStep" else 1)
                for r in acting:
                    agent = ("player_1", "player_2")[r]
                    row = 2 * j + r
                    mask = batch.action_mask[row].copy()
                    # SameStep: an ended env's rows hold the ended game's rewards beside the new game's
                    # first observation, whose reward since the agent's last decision is 0
                    reward = 0.0 if ended else float(batch.reward[row])
                    played[e][-1][0].append((agent, batch.obs[row].copy(), mask, reward))
                    actions[row] = chooser(e)(agent, mask)
            envs.send({"player": actions}, ids)
            result = envs.recv()
        rngs = [np.random.default_rng(100 + e) for e in range(num_envs)]
        for e in range(num_envs):
            expected = aec_games(pettingzoo.make("aec", TICTACTOE), seed + e, games, chooser(e))
            for (decisions, finals), (want_decisions, want_finals) in zip(played[e][:games], expected):
                assert finals == want_finals
                assert len(decisions) == len(want_decisions)
                for got, want in zip(decisions, want_decisions):
                    assert got[0] == want[0] and got[3] == want[3]
                    np.testing.assert_array_equal(got[1], want[1])
                    np.testing.assert_array_equal(got[2], want[2])
    finally:
        envs.close()


def test_two_player_game_gives_each_player_its_reward():
    num_envs, seed = 2, 11
    envs = portal_shm.make_vec_ma(
        "portal_shm.server.example_envs:MatchingPenniesEnv", num_envs, api="two_player", env_kwargs={"rounds": 4}
    )
    games = [MatchingPenniesEnv(rounds=4) for _ in range(num_envs)]
    try:
        assert envs.groups["agent"].agents == ("agent_0", "agent_1")
        result = envs.reset(seed=seed)
        for e, game in enumerate(games):
            obs, _ = game.reset(seed=seed + e)
            np.testing.assert_array_equal(result.groups["agent"].obs[2 * e : 2 * e + 2], [obs, obs])
        rng = np.random.default_rng(0)
        for t in range(1, 10):
            actions = rng.integers(0, 2, num_envs * 2)
            batch = envs.step({"agent": actions}).groups["agent"]
            for e, game in enumerate(games):
                if t == 5:  # NextStep: the step after the 4th round resets
                    obs, _ = game.reset()
                    reward, done = 0.0, False
                else:
                    obs, reward, done, _, _ = game.step({"agent_0": actions[2 * e], "agent_1": actions[2 * e + 1]})
                rows = slice(2 * e, 2 * e + 2)
                np.testing.assert_array_equal(batch.reward[rows], [reward, -reward])
                np.testing.assert_array_equal(batch.terminated[rows], [done, done])
                np.testing.assert_array_equal(batch.obs[rows], [obs, obs])  # when done too: the real last one
    finally:
        envs.close()


def test_groups_that_force_different_spaces_together_are_refused():
    with pytest.raises(
        ValueError, match=r"groups\['all'\] puts agents with different spaces together.*separate groups"
    ):
        multi_agent.parallel(MPE, groups={"all": ["adversary_0", "agent_0", "agent_1"]})
    with pytest.raises(ValueError, match=r"every possible agent exactly once: missing \['agent_1'\]"):
        multi_agent.parallel(MPE, groups={"adversary": ["adversary_0"], "agent": ["agent_0"]})
    env = multi_agent.parallel(MPE, groups={"bad": ["adversary_0"], "good": ["agent_0", "agent_1"]})
    assert list(env.observation_space) == ["bad", "good"]
    with pytest.raises(portal_shm.EnvError, match=r"env 0 raised ValueError in make: groups\['all'\] puts agents"):
        portal_shm.make_vec_ma(MPE, 1, groups={"all": ["adversary_0", "agent_0", "agent_1"]})  # (a ValueError too)
    with pytest.raises(EnvNotFound, match="PettingZoo env 'classic/no_such_game-v1' \\(aec\\)"):
        multi_agent.aec("classic/no_such_game-v1")


@pytest.mark.parametrize("dead_obs", ["zeros", "last"])
def test_turn_based_adapter_steps_past_ended_agents_with_their_rewards(dead_obs):
    """In-process: a won game of tic-tac-toe ends on the winning move with both players' rewards and
    final boards."""
    env = multi_agent.aec(TICTACTOE, dead_obs=dead_obs)
    obs, _ = env.reset(seed=0)
    for move in (0, 3, 1, 4):
        assert obs["player"]["mask"].sum() == 1
        obs, reward, terminated, truncated, _ = env.step({"player": np.array([move, move])})
        assert not terminated
    obs, reward, terminated, truncated, _ = env.step({"player": np.array([2, 2])})  # player_1: 0, 1, 2
    fields = obs["player"]
    assert terminated and not truncated and reward == 0.0
    assert fields["reward"].tolist() == [1.0, -1.0] and fields["terminated"].all() and not fields["mask"].any()
    assert fields["obs"][0, 0, :, 0].tolist() == [1, 1, 1]  # the winner's final board, its pieces


def test_bad_calls_name_the_fix():
    with pytest.raises(ValueError, match="api must be one of"):
        portal_shm.make_vec_ma(MPE, 1, api="turns")
    envs = portal_shm.make_vec_ma(LEAVING, 2)
    try:
        envs.reset(seed=0)
        with pytest.raises(
            ValueError, match=r"actions\['a'\] has shape \(5,\): give one row per agent slot, 2 envs x 3"
        ):
            envs.step({"a": np.zeros(5, np.int64)})
        with pytest.raises(ValueError, match=r"one entry per group \['a'\]"):
            envs.step({"b": np.zeros(6, np.int64)})
    finally:
        envs.close()
    plain = portal_shm.make_vec("CartPole-v1", 1)
    with pytest.raises(ValueError, match="needs envs served by portal_shm.server.multi_agent"):
        portal_shm.MultiAgentPortal(plain)
    assert plain.closed


NAMED = "portal_shm.server.example_envs:named_agents_env"


def test_env_kwargs_of_any_name_reach_the_env_unchanged():
    """An env whose own arguments are named like make_vec_ma's and the adapters' (env_id, num_envs,
    groups, dead_obs) gets them as given, and the adapter keeps its own."""
    made_with = {"env_id": "inner-7", "num_envs": 5, "groups": "mine", "num_agents": 2}
    envs = portal_shm.make_vec_ma(NAMED, 2, env_kwargs=made_with)
    try:
        assert envs.portal.get_attr("made_with") == (made_with, made_with)
        assert list(envs.groups) == ["a"] and envs.groups["a"].agents == ("a_0", "a_1")
        assert envs.dead_obs == "zeros" and envs.num_envs == 2
    finally:
        envs.close()
    env = multi_agent.parallel(NAMED, groups={"g": ["a_0", "a_1"]}, env_kwargs={"groups": "theirs", "num_agents": 2})
    assert list(env.observation_space) == ["g"] and env.env.made_with["groups"] == "theirs"
    assert multi_agent.two_player(MatchingPenniesEnv, env_kwargs={"rounds": 3}).env.env.rounds == 3
    with pytest.raises(TypeError, match=r"env kwargs \['num_agents'\] are given both in env_kwargs and as keyword"):
        multi_agent.parallel(NAMED, env_kwargs={"num_agents": 2}, num_agents=2)


def test_leaving_env_refuses_an_action_for_an_absent_agent():
    """The test env's own guard, which the contract test relies on."""
    env = LeavingAgentsEnv(leave_at=1)
    env.reset(seed=0)
    env.step({"a_0": 0, "a_1": 0, "a_2": 0})
    with pytest.raises(ValueError, match="actions for"):
        env.step({"a_0": 0, "a_1": 0, "a_2": 0})


def test_action_masks_from_infos_ride_in_the_ring():
    """In-process: ``info_action_mask=True`` takes ``infos[agent]["action_mask"]`` into the
    ``action_mask`` field (its other info keys stay in ``info["agents"]``); without a mask in an
    agent's info, every action is allowed."""
    env = multi_agent.parallel(LEAVING, info_action_mask=True, info_masks=True)
    assert env.multi_agent_layout["groups"][0]["action_mask"] is True
    obs, info = env.reset(seed=0)
    assert obs["a"]["action_mask"].tolist() == [[0, 1, 1]] * 3
    assert info["agents"]["a_0"] == {"t": 0}
    obs, _, _, _, info = env.step({"a": np.zeros(3, np.int64)})
    assert obs["a"]["action_mask"].tolist() == [[1, 0, 1]] * 3 and info["agents"]["a_2"] == {"t": 1}
    plain = multi_agent.parallel(LEAVING, info_action_mask=True)
    assert plain.reset(seed=0)[0]["a"]["action_mask"].tolist() == [[1, 1, 1]] * 3
    box = LeavingAgentsEnv().observation_space("a_0")
    with pytest.raises(ValueError, match="info_action_mask=True needs Discrete actions"):
        Group("g", ["x"], box, box, info_mask=True)
