"""Exact restarts at an episode's boundary: a server that dies right after its envs ended an episode
is replaced by one restored from their episode-end states, and the failed step is made again, so the
run gives gymnasium's SyncVectorEnv's transitions exactly (less the ``env_restarted`` flags).

``testkit.plain_envs.crashing_walk`` is a plain env (no ``get_state``, no adapter: its randomness
in generators of the env and its wrappers) whose process exits when it claims a token file: in the
autoreset's reset (NEXT_STEP) or in the first step of an episode (SAME_STEP), the moments right
after an episode's end. Without the states being carried, each crash cuts an episode and reseeds
the env (``restart_seed``), and the runs differ from the reference from there on.
"""

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode

import portal_shm
from portal_shm.agent.contract.validate import check_end_states
from portal_shm.errors import ServerProtocolError
from portal_shm.wire.end_states import MAX_STATE_BYTES
from testkit.compare import assert_same, snapshot
from testkit.hosts import HostProcess, Keys
from testkit.plain_envs import crashing_walk

pytestmark = pytest.mark.integration

CRASHING = "testkit.plain_envs:crashing_walk"
PHASE = {"NextStep": "reset", "SameStep": "first_step"}
FLAGS = ("env_restarted", "_env_restarted", "env_failure", "_env_failure")


def _run(envs, steps, seed, crash_at=(), token=None, crashes=1):
    """A seeded random rollout; before each step in ``crash_at`` the token file is written, so
    the next reset (or first step) of some env exits its process. Returns the records (less the
    restart flags) and, per step, which envs showed ``env_restarted``."""
    envs.action_space.seed(seed)
    records, restarted = [snapshot(envs.reset(seed=seed))], []
    for t in range(steps):
        if t in crash_at:
            token.write_text(str(crashes))
        result = snapshot(envs.step(envs.action_space.sample()))
        infos = result[4]
        restarted.append(infos.get("env_restarted", np.zeros(envs.num_envs, bool)) & infos.get("_env_restarted", True))
        for key in FLAGS:
            infos.pop(key, None)
        records.append(result)
    return records, np.array(restarted)


def _reference(mode, n, steps, seed):
    reference = gym.vector.SyncVectorEnv([crashing_walk] * n, autoreset_mode=AutoresetMode(mode))
    try:
        return _run(reference, steps, seed)[0]
    finally:
        reference.close()


def _portal(mode, n, token, **vector_kwargs):
    return portal_shm.make_vec(
        CRASHING,
        n,
        env_kwargs={"token_path": str(token), "phase": PHASE[mode]},
        vector_kwargs={
            "autoreset_mode": mode,
            "on_env_failure": "restart",
            "envs_per_server": 1,
            "startup_timeout": 60,
            **vector_kwargs,
        },
    )


@pytest.mark.parametrize("mode", ["NextStep", "SameStep"])
def test_a_server_dying_after_an_episode_end_is_restored_and_the_run_equals_sync_vector_env(mode, tmp_path):
    n, steps, seed, crash_at = 4, 160, 7, (20, 55, 100)
    token = tmp_path / "token"
    expected = _reference(mode, n, steps, seed)
    envs = _portal(mode, n, token)
    try:
        got, restarted = _run(envs, steps, seed, crash_at, token)
        log = envs.restart_log
        restarts = envs.restarts
    finally:
        envs.close()
    assert not token.exists(), "a crash was never made"
    assert sum(restarts) == len(crash_at) == restarted.sum(), (restarts, restarted.sum())
    assert [(r["phase"], r["counted"], r["attempts"], r["shown"]) for r in log] == [("step", True, 1, "step")] * 3
    assert_same(got, expected)


def test_an_env_server_of_a_remote_host_is_restored_the_same_way(tmp_path):
    """A host serves each agent through a local portal with the agent's options, so a server of
    the host dying right after an episode end is repaired there, exactly (a host lost as a whole
    ends its envs' episodes: remote/client/recovery.py)."""
    mode, n, steps, seed = "NextStep", 2, 80, 7
    token = tmp_path / "token"
    expected = _reference(mode, n, steps, seed)
    keys = Keys(str(tmp_path / "keys"))
    host = HostProcess(keys, "--entry-points", "testkit.plain_envs:*", "--env-kwargs", "token_path")
    try:
        envs = portal_shm.make_vec(
            CRASHING,
            n,
            backend="remote",
            hosts=[host.address],
            **keys.options(),
            env_kwargs={"token_path": str(token), "phase": PHASE[mode]},
            vector_kwargs={"on_env_failure": "restart", "envs_per_server": 1},
        )
        try:
            got, restarted = _run(envs, steps, seed, (20, 50), token)
        finally:
            envs.close()
    finally:
        host.stop()
    assert not token.exists(), "a crash was never made"
    assert restarted.sum() == 2
    assert_same(got, expected)


def test_a_failure_that_comes_back_in_the_restored_step_ends_the_episode_with_a_new_seed(tmp_path):
    """The restored server dies again making the step (what its generators drew causes it): the
    restart ends the episode as any mid-episode one does (truncated, the next step resets with
    ``restart_seed``) rather than dying on every fresh server."""
    mode, n, steps, seed = "NextStep", 1, 60, 3  # one env: the second crash is its own
    token = tmp_path / "token"
    expected = _reference(mode, n, steps, seed)
    envs = _portal(mode, n, token)
    try:
        got, restarted = _run(envs, steps, seed, (10,), token, crashes=2)
        log = envs.restart_log
    finally:
        envs.close()
    assert not token.exists()
    [record] = log
    assert (record["counted"], record["attempts"], record["shown"]) == (True, 2, "step"), record
    [t], [i] = np.nonzero(restarted)
    truncated = got[t + 1][3]
    assert truncated[i] and not got[t + 1][2][i], "the episode ends where the restart shows"
    assert_same(got[: t + 1], expected[: t + 1])
    assert not np.allclose(got[t + 2][0][i], expected[t + 2][0][i]), "a new seed: the reset differs"


def test_a_server_of_several_envs_not_all_at_an_end_ends_their_episodes(tmp_path):
    """Two envs per server: when only one of them ended its episode in the step before, the other
    has no state to resume from; the restart ends both episodes (truncated), as before."""
    mode, n, steps, seed = "NextStep", 2, 40, 5
    token = tmp_path / "token"
    envs = _portal(mode, n, token, envs_per_server=2)
    try:
        envs.action_space.seed(seed)
        envs.reset(seed=seed)
        lone = None
        for _ in range(steps):
            obs, reward, terminated, truncated, infos = envs.step(envs.action_space.sample())
            done = terminated | truncated
            if lone is not None:
                assert infos["env_restarted"].all() and truncated.all(), (infos, truncated)
                break
            if done.sum() == 1:
                token.write_text("1")
                lone = int(np.argmax(done))
        assert lone is not None, "no step ended exactly one episode"
        assert envs.restarts == [1, 1]
    finally:
        envs.close()


def test_episode_end_states_from_a_server_are_checked():
    envs = [4, 5]
    assert check_end_states({4: b"s", 5: b"t"}, envs, "server 2") == {4: b"s", 5: b"t"}
    assert check_end_states({4: b"x" * (MAX_STATE_BYTES + 1), 5: b"t"}, envs, "server 2") == {5: b"t"}
    for bad in ([b"s"], {3: b"s"}, {4: "s"}, {True: b"s"}, None):
        with pytest.raises(ServerProtocolError, match="server 2 left invalid episode-end states"):
            check_end_states(bad, envs, "server 2")
