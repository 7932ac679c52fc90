"""Multi-agent envs on an env host (``portal-shm host`` on 127.0.0.1, real CURVE keys) through
``make_vec_ma(..., backend="remote")``: the same rows as PettingZoo's own loops in this process.

The host's process runtime serves the adapters (test_multi_agent_docker.py runs them in the
``portal-shm/pettingzoo`` image), and the host's policy checks the inner env (``env_id``)
against its entry-point allow-list as it checks a preset's."""

import numpy as np
import pettingzoo
import pytest
from mpe2 import simple_adversary_v3

import portal_shm
from portal_shm.errors import HostPolicyError
from testkit.hosts import HostProcess, Keys
from testkit.multi_agent_replay import ParallelReplay, actions_of, aec_games

pytestmark = pytest.mark.integration

MPE = "mpe2.simple_adversary_v3:parallel_env"
ALLOWED = ("--entry-points", "portal_shm.server.multi_agent:*,mpe2.*:*", "--envs", "classic/tictactoe-v3")


@pytest.fixture(scope="module")
def keys(tmp_path_factory):
    return Keys(str(tmp_path_factory.mktemp("keys")))


@pytest.fixture(scope="module")
def host(keys):
    process = HostProcess(keys, *ALLOWED)
    yield process
    process.stop()
    assert process.process.returncode == 0, process.log


def test_mpe_on_a_host_in_8_servers_equals_8_in_process_envs(host, keys):
    num_envs, seed = 8, 21
    envs = portal_shm.make_vec_ma(
        MPE, num_envs, backend="remote", hosts=[host.address], **keys.options(), vector_kwargs={"envs_per_server": 1}
    )
    replays = [ParallelReplay(simple_adversary_v3.parallel_env(), seed + i) for i in range(num_envs)]
    try:
        assert len(envs.portal.servers) == num_envs
        expected = [rows for rows, _, _ in (replay.reset() for replay in replays)]
        result = envs.reset(seed=seed)
        rng = np.random.default_rng(seed)
        for step in range(60):  # two episodes of 25 steps and their autoresets
            for name, batch in result.groups.items():
                for row, (e, agent) in enumerate(envs.agent_ids[name]):
                    want = expected[e][agent]
                    np.testing.assert_array_equal(batch.obs[row], want["obs"], err_msg=f"step {step} {agent}")
                    assert (batch.reward[row], batch.terminated[row], batch.truncated[row], batch.mask[row]) == (
                        want["reward"],
                        want["terminated"],
                        want["truncated"],
                        want["mask"],
                    ), f"step {step}, env {e}, {agent}"
            actions = {name: rng.integers(0, 5, num_envs * group.size) for name, group in envs.groups.items()}
            result = envs.step(actions)
            expected = []
            for i, replay in enumerate(replays):
                expected.append(replay.step(actions_of(envs, actions, i))[0])
    finally:
        envs.close()


def test_tictactoe_on_a_host_in_async_batches_equals_pettingzoos_own_loop(host, keys):
    num_envs, batch_size, seed = 4, 2, 3
    envs = portal_shm.make_vec_ma(
        "classic/tictactoe-v3",
        num_envs,
        api="aec",
        backend="remote",
        hosts=[host.address],
        **keys.options(),
        vector_kwargs={"batch_size": batch_size, "autoreset_mode": "SameStep"},
    )
    rngs = [np.random.default_rng(e) for e in range(num_envs)]
    decisions = [[] for _ in range(num_envs)]
    try:
        result = envs.reset(seed=seed)
        while min(map(len, decisions)) < 9:  # a game has at most 9 moves: the first game is whole
            ids = result.infos["env_id"].tolist()
            batch = result.groups["player"]
            actions = np.zeros(2 * len(ids), np.int64)
            for j, e in enumerate(ids):
                (r,) = np.flatnonzero(batch.mask[2 * j : 2 * j + 2])
                row = 2 * j + r
                decisions[e].append((("player_1", "player_2")[r], batch.obs[row].copy()))
                actions[row] = rngs[e].choice(np.flatnonzero(batch.action_mask[row]))
            envs.send({"player": actions}, ids)
            result = envs.recv()
        rngs = [np.random.default_rng(e) for e in range(num_envs)]
        for e in range(num_envs):
            (game, _), *_ = aec_games(
                pettingzoo.make("aec", "classic/tictactoe-v3"),
                seed + e,
                1,
                lambda agent, mask, e=e: int(rngs[e].choice(np.flatnonzero(mask))),
            )
            assert [agent for agent, _ in decisions[e][: len(game)]] == [agent for agent, *_ in game]
            for (_, obs), (_, want, _, _) in zip(decisions[e], game):
                np.testing.assert_array_equal(obs, want)
    finally:
        envs.close()


def test_a_host_checks_the_inner_env_against_its_allow_list(host, keys):
    with pytest.raises(
        HostPolicyError, match="entry point 'pettingzoo.butterfly.pistonball_v6:parallel_env' is not allowed"
    ):
        portal_shm.make_vec_ma(
            "pettingzoo.butterfly.pistonball_v6:parallel_env",
            1,
            backend="remote",
            hosts=[host.address],
            **keys.options(),
        )
