"""Every counted restart is shown once in the infos: ``envs.restarts`` equals the ``env_restarted``
flags a client saw, whatever phase the failure came in.

Each failure is made to happen at an exact moment (``testkit.restart_envs.TokenFaultEnv`` exits where a
token file says, or the test kills a server it knows is in the middle of something), never by
timing. The short chaos soak (test_chaos.py) found the first of these by chance: a recycled
server's fresh one, killed before it had restored its envs' states, was restarted in place and
counted, and no infos ever said so (``restarts: portal [1, 1, 0, 0], infos [0, 0, 0, 0]``).
"""

import os
import signal
import time

import numpy as np
import pytest

import portal_shm
from portal_shm import VectorPortal, restart_seed
from portal_shm.backends import EnvSpec

pytestmark = pytest.mark.integration

TOKEN_FAULT = "testkit.restart_envs:TokenFaultEnv"
RESTART = {"on_env_failure": "restart", "max_restarts": 10, "step_timeout": 30}


def _make(n, tokens, phase, vector, restore_s=0.0):
    """``n`` envs, env ``i`` failing in ``phase`` once the file ``tokens / str(i)`` exists."""
    specs = [
        EnvSpec(TOKEN_FAULT, {"token_path": str(tokens / str(i)), "phase": phase, "restore_s": restore_s})
        for i in range(n)
    ]
    return VectorPortal(specs, **{**RESTART, **vector})


def _shown(infos, n, ids=None):
    """Which envs these infos flag ``env_restarted`` (per env of the portal)."""
    out = np.zeros(n, np.int64)
    flags = infos.get("_env_restarted")
    if flags is not None:
        ids = np.arange(len(flags)) if ids is None else ids
        np.add.at(out, ids[np.asarray(flags, bool)], 1)
    return out


def _step(envs, seen):
    result = envs.step(np.ones(envs.batch_size or envs.num_envs, np.int64))
    seen += _shown(result[4], envs.num_envs, result[4].get("env_id"))
    return result


def _agree(envs, seen):
    """The portal's counts against the infos', naming the restarts when they differ."""
    assert envs.restarts == seen.tolist(), (envs.restarts, seen.tolist(), getattr(envs, "restart_log", None))
    for record in envs.restart_log:
        assert record["counted"] == (record["shown"] is not None), record


def _recycle_until(envs, seen, done, steps=600):
    for _ in range(steps):
        _step(envs, seen)
        if done():
            return
        time.sleep(0.002)  # spares start meanwhile
    raise AssertionError(f"not within {steps} steps: recycles {envs.recycles}, restarts {envs.restart_log}")


def test_a_recycled_server_killed_while_it_restores_its_states_is_restarted_in_place_uncounted(tmp_path):
    """The chaos soak's failure, made exact: right after a swap the fresh server restores the states
    it was sent (1 s here) while the agent goes on; the test kills it then, before the next step."""
    envs = _make(2, tmp_path, "none", {"envs_per_server": 1, "recycle": {"episodes": 1}}, restore_s=1.0)
    seen = np.zeros(2, np.int64)
    try:
        envs.reset(seed=7)
        owing = lambda: [s for s in envs._session.servers if s.owed is not None]  # noqa: E731
        _recycle_until(envs, seen, lambda: bool(owing()))
        server = owing()[0]
        os.kill(server.handle.host_pid(), signal.SIGKILL)  # its states are not restored yet
        for _ in range(20):
            _step(envs, seen)
        _agree(envs, seen)
        assert envs.restarts == [0, 0]
        (record,) = envs.restart_log
        assert record["envs"] == server.env_indices
        assert record["phase"] == "recycle" and not record["counted"] and record["attempts"] == 1
        assert "ServerDiedError" in record["cause"] and "SIGKILL" in record["cause"], record
    finally:
        envs.close()


def test_a_recycled_server_dying_in_its_restore_is_not_counted_and_its_envs_go_on(tmp_path):
    token = tmp_path / "0"
    envs = _make(2, tmp_path, "set_state", {"envs_per_server": 1, "recycle": {"episodes": 1}})
    seen = np.zeros(2, np.int64)
    try:
        envs.reset(seed=3)
        token.write_text("")  # the next spare's set_state exits its process
        _recycle_until(envs, seen, lambda: not token.exists() and min(envs.recycles) >= 2)
        _agree(envs, seen)
        assert envs.restarts == [0, 0] and [r["phase"] for r in envs.restart_log] == ["recycle"]
    finally:
        envs.close()


@pytest.mark.parametrize("batched", [False, True], ids=["lockstep", "batches"])
def test_a_restart_in_a_call_is_shown_by_the_reset_that_comes_before_the_next_step(tmp_path, batched):
    token = tmp_path / "0"
    vector = {"envs_per_server": 1, **({"batch_size": 2} if batched else {})}
    envs = _make(4, tmp_path, "render", vector)
    seen = np.zeros(4, np.int64)
    try:
        envs.reset(seed=1)
        token.write_text("")
        with pytest.raises(portal_shm.errors.ServerDiedError):
            envs.call("render")  # server 0 dies in it and is restarted; its envs' episodes are over
        assert envs.restarts == [1, 0, 0, 0]
        obs, infos = envs.reset(seed=1)  # ... and this reset begins new ones: it shows the restart
        seen += _shown(infos, 4, infos.get("env_id"))
        for _ in range(6):
            _step(envs, seen)
        _agree(envs, seen)
        assert envs.restarts == [1, 0, 0, 0]
        (record,) = envs.restart_log
        assert record["phase"] == "call" and record["shown"] == ("batch" if batched else "reset"), record
    finally:
        envs.close()


def test_two_failed_calls_before_a_step_end_the_episode_once(tmp_path):
    token = tmp_path / "0"
    envs = _make(2, tmp_path, "render", {"envs_per_server": 1})
    seen = np.zeros(2, np.int64)
    try:
        envs.reset(seed=2)
        for _ in range(2):
            token.write_text("")
            with pytest.raises(portal_shm.errors.ServerDiedError):
                envs.call("render")
        _, _, _, truncated, _ = _step(envs, seen)
        assert truncated[0] and seen.tolist() == [1, 0]
        _step(envs, seen)
        _agree(envs, seen)
        assert envs.restarts == [1, 0]
        (record,) = envs.restart_log
        assert record["attempts"] == 2 and record["shown"] == "step"  # two fresh servers, one episode end
    finally:
        envs.close()


@pytest.mark.parametrize(
    "mode, phase, restarts",
    [("NextStep", "init", 1), ("SameStep", "init", 1), ("SameStep", "reset", 1), ("NextStep", "reset", 2)],
)
def test_a_fresh_server_that_fails_too_is_counted_as_its_envs_are_shown_restarted(tmp_path, mode, phase, restarts):
    """A fresh server that dies before its envs stepped: made (``init``) or reset in the step that
    ends the episode (SameStep) is the same restart, one ``env_restarted`` and the first restart's
    seed however many servers it took; NextStep resets in the next step, whose failure ends that
    (empty) episode once more, shown there too."""
    token = tmp_path / "1"
    envs = _make(2, tmp_path, phase, {"envs_per_server": 1, "autoreset_mode": mode})
    seen = np.zeros(2, np.int64)
    try:
        envs.reset(seed=5)
        _step(envs, seen)
        token.write_text("")  # the fresh server started for the kill below dies too (made, or reset)
        os.kill(envs.servers[1]["pid"], signal.SIGKILL)
        obs, _, _, truncated, infos = _step(envs, seen)
        assert truncated[1] and seen.tolist() == [0, 1]
        for _ in range(restarts if mode == "NextStep" else 0):
            obs = _step(envs, seen)[0]
        assert not token.exists()
        expected = TOKEN_FAULT_REFERENCE(restart_seed(6, restarts))
        assert np.array_equal(obs[1], expected), (obs[1], expected)
        _agree(envs, seen)
        assert envs.restarts == [0, restarts]
        assert sum(record["attempts"] for record in envs.restart_log) == 2, envs.restart_log
    finally:
        envs.close()


def TOKEN_FAULT_REFERENCE(seed):
    from testkit.restart_envs import TokenFaultEnv

    env = TokenFaultEnv()
    obs, _ = env.reset(seed=seed)
    return obs


def test_a_restart_in_a_reset_is_counted_and_shown_by_that_reset(tmp_path):
    token = tmp_path / "0"
    envs = _make(2, tmp_path, "reset", {"envs_per_server": 1})
    seen = np.zeros(2, np.int64)
    try:
        envs.reset(seed=4)
        token.write_text("")  # server 0 dies in the next reset, which is repeated on a fresh one
        obs, infos = envs.reset(seed=4)
        seen += _shown(infos, 2)
        assert seen.tolist() == [1, 0] and "exit code 3" in infos["env_failure"][0], infos
        assert np.array_equal(obs[0], TOKEN_FAULT_REFERENCE(4))  # the reset repeated, with its own seed
        _step(envs, seen)
        _agree(envs, seen)
        assert [r["phase"] for r in envs.restart_log] == ["reset"]
    finally:
        envs.close()
