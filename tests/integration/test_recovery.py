"""on_env_failure="restart": failed env servers are replaced, the other envs never notice.

Servers are SIGKILLed for real (between steps and in the middle of one); each env is checked
step by step against its own gymnasium SyncVectorEnv replica driven with the same actions, and a
restarted env's new episode against a replica reset with ``restart_seed``.
"""

import gc
import os
import signal
import threading
import time

import gymnasium as gym
import numpy as np
import pytest

import portal_shm
from portal_shm import VectorPortal, restart_seed
from portal_shm.backends import EnvSpec

pytestmark = pytest.mark.integration

FAULTY = "portal_shm.server.example_envs:FaultyEnv"


def _server_pids(envs) -> dict:
    """server index -> pid of its current process."""
    return {s["server"]: int(s["runtime"].split()[2].rstrip(",")) for s in envs.servers}


def _replica(seed, mode="NextStep"):
    replica = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1")], autoreset_mode=mode)
    obs, info = replica.reset(seed=seed)
    return replica, obs[0]


@pytest.mark.slow  # a soak: 10,000 steps under random kills
def test_random_kills_during_10000_steps_leave_every_env_exactly_as_sync_vector_env():
    num_envs, steps, seed = 8, 10_000, 123
    envs = portal_shm.make_vec(
        "CartPole-v1",
        num_envs,
        vector_kwargs={"on_env_failure": "restart", "max_restarts": 50, "envs_per_server": 2, "step_timeout": 60},
    )
    rng = np.random.default_rng(8)
    kill_at = set(rng.choice(np.arange(50, steps), size=16, replace=False).tolist())
    replicas, restarts, pending = [], [0] * num_envs, [False] * num_envs
    checked_restarts = 0
    try:
        obs, _ = envs.reset(seed=seed)
        for i in range(num_envs):
            replica, first = _replica(seed + i)
            replicas.append(replica)
            assert np.array_equal(obs[i], first)
        last_obs = obs.copy()
        for t in range(steps):
            timer = None
            if t in kill_at:
                victim = _server_pids(envs)[int(rng.integers(num_envs // 2))]
                if t % 2:  # between steps
                    os.kill(victim, signal.SIGKILL)
                else:  # most likely in the middle of this step
                    timer = threading.Timer(0.0002, os.kill, (victim, signal.SIGKILL))
                    timer.start()
            actions = rng.integers(0, 2, num_envs)
            obs, reward, terminated, truncated, infos = envs.step(actions)
            if timer is not None:
                timer.join()
            restarted = infos.get("_env_restarted", np.zeros(num_envs, bool))
            for i in range(num_envs):
                cut = truncated[i] and reward[i] == 0.0  # (CartPole's every step rewards 1)
                if restarted[i] and not cut:
                    # killed right after both its envs' episodes ended: restored, the step made again
                    r_obs, r_reward, r_terminated, r_truncated, _ = replicas[i].step(actions[i : i + 1])
                    assert np.array_equal(obs[i], r_obs[0]) and reward[i] == r_reward[0], (t, i)
                    assert terminated[i] == r_terminated[0] and truncated[i] == r_truncated[0]
                    restarts[i] += 1
                    checked_restarts += 1
                elif restarted[i]:
                    # the episode ends where it was: last observation, truncated, reward 0
                    assert truncated[i] and not terminated[i] and reward[i] == 0.0
                    assert np.array_equal(obs[i], last_obs[i])
                    restarts[i] += 1
                    pending[i] = True
                    checked_restarts += 1
                elif pending[i]:
                    # the next step is the fresh env's reset, with the documented derived seed
                    replicas[i].close()
                    replicas[i], first = _replica(restart_seed(seed + i, restarts[i]))
                    assert np.array_equal(obs[i], first), (t, i)
                    assert reward[i] == 0.0 and not terminated[i] and not truncated[i]
                    pending[i] = False
                else:
                    r_obs, r_reward, r_terminated, r_truncated, _ = replicas[i].step(actions[i : i + 1])
                    assert np.array_equal(obs[i], r_obs[0]), (t, i)
                    assert reward[i] == r_reward[0] and terminated[i] == r_terminated[0]
                    assert truncated[i] == r_truncated[0]
            last_obs = obs.copy()
        # every kill restarted a server: both envs of it, once each
        assert checked_restarts == sum(restarts) >= 2 * len(kill_at)
        assert envs.restarts == restarts
    finally:
        envs.close()
        for replica in replicas:
            replica.close()


def test_restart_budget_is_enforced_per_env():
    envs = VectorPortal(
        [EnvSpec(FAULTY, {"fault": "none"}), EnvSpec(FAULTY, {"fault": "exit", "phase": "step", "after": 2})],
        on_env_failure="restart",
        max_restarts=2,
        step_timeout=20,
    )
    try:
        envs.reset(seed=0)
        outcomes = []
        with pytest.raises(portal_shm.errors.RestartLimitError, match=r"envs \[1\] failed after 2 restarts") as info:
            for _ in range(20):
                _, _, _, truncated, infos = envs.step(np.zeros(2, np.int64))
                outcomes.append(bool(infos.get("_env_restarted", [False, False])[1]))
        assert outcomes.count(True) == 2  # two restarts, the third failure raised
        assert "exit code 7" in str(info.value)
        with pytest.raises(portal_shm.PortalError, match="cannot continue"):
            envs.step(np.zeros(2, np.int64))
    finally:
        envs.close()


@pytest.mark.parametrize("mode", ["SameStep", "Disabled"])
def test_restart_in_other_autoreset_modes(mode):
    envs = portal_shm.make_vec(
        "CartPole-v1",
        2,
        vector_kwargs={"on_env_failure": "restart", "envs_per_server": 1, "autoreset_mode": mode, "step_timeout": 30},
    )
    try:
        obs, _ = envs.reset(seed=5)
        last = obs.copy()
        os.kill(_server_pids(envs)[1], signal.SIGKILL)
        obs, reward, terminated, truncated, infos = envs.step(np.zeros(2, np.int64))
        assert infos["_env_restarted"].tolist() == [False, True] and truncated[1] and reward[1] == 0.0
        assert "SIGKILL" in infos["env_failure"][1]
        if mode == "SameStep":
            assert np.array_equal(infos["final_obs"][1], last[1])
            _, expected = _replica(restart_seed(6, 1))
            assert np.array_equal(obs[1], expected)
        else:
            assert np.array_equal(obs[1], last[1])
            obs, _ = envs.reset(seed=[None, 9], options={"reset_mask": np.array([False, True])})
            _, expected = _replica(9)
            assert np.array_equal(obs[1], expected)
        envs.step(np.zeros(2, np.int64))
    finally:
        envs.close()


def test_failures_outside_steps_restart_too():
    envs = portal_shm.make_vec("CartPole-v1", 2, vector_kwargs={"on_env_failure": "restart", "envs_per_server": 1})
    try:
        envs.reset(seed=1)
        os.kill(_server_pids(envs)[0], signal.SIGKILL)
        obs, infos = envs.reset(seed=1)  # the reset is repeated on a fresh server
        assert infos["_env_restarted"].tolist() == [True, False]
        _, expected = _replica(1)
        assert np.array_equal(obs[0], expected)
        os.kill(_server_pids(envs)[1], signal.SIGKILL)
        with pytest.raises(portal_shm.errors.ServerDiedError):
            envs.get_attr("gravity")  # the call fails, the server is replaced ...
        _, _, _, truncated, infos = envs.step(np.zeros(2, np.int64))
        assert truncated.tolist() == [False, True] and infos["_env_restarted"].tolist() == [False, True]
        assert envs.get_attr("gravity") == (9.8, 9.8)  # ... and the portal goes on
    finally:
        envs.close()


# -- async batches -------------------------------------------------------------------------------
class BatchReplicas:
    """Each env's own CartPole replica, checked env by env against the batches ``recv`` returns."""

    def __init__(self, num_envs: int, seed: int, mode: str, obs, infos):
        self.seed, self.mode, self.replicas, self.last = seed, mode, [], {}
        self.restarts, self.pending = [0] * num_envs, [False] * num_envs
        self.actions: dict = {}
        self.unseen_resets = set(range(num_envs))  # envs whose reset batch is still to come
        for i in range(num_envs):
            replica, first = _replica(seed + i, mode)
            self.replicas.append(replica)
            self.last[i] = first
        self.check_reset(obs, infos)

    def check_reset(self, obs, infos):
        for j, i in enumerate(infos["env_id"].tolist()):
            assert np.array_equal(obs[j], self.last[i])
            self.unseen_resets.remove(i)

    def sent(self, actions, ids):
        self.actions.update(zip(ids.tolist(), actions.tolist()))

    def check(self, result) -> int:
        """Check one batch; returns how many of its envs were restarted."""
        obs, reward, terminated, truncated, infos = result
        restarted = infos.get("_env_restarted", np.zeros(len(obs), bool))
        for j, i in enumerate(infos["env_id"].tolist()):
            if restarted[j]:
                # the episode ends where it was: truncated, reward 0, with the last observation
                # (SameStep: as final_obs, beside the fresh env's reset observation)
                assert truncated[j] and not terminated[j] and reward[j] == 0.0
                assert "SIGKILL" in infos["env_failure"][j]
                self.restarts[i] += 1
                if self.mode == "SameStep":
                    assert np.array_equal(infos["final_obs"][j], self.last[i])
                    self._restart_replica(i, obs[j])
                else:
                    assert np.array_equal(obs[j], self.last[i])
                    self.pending[i] = True
            elif self.pending[i]:
                # NextStep: the next batch with this env is the fresh env's reset
                self._restart_replica(i, obs[j])
                assert reward[j] == 0.0 and not terminated[j] and not truncated[j]
                self.pending[i] = False
            elif i in self.unseen_resets:
                assert np.array_equal(obs[j], self.last[i])
                self.unseen_resets.remove(i)
            else:
                r_obs, r_reward, r_terminated, r_truncated, _ = self.replicas[i].step(np.array([self.actions[i]]))
                assert np.array_equal(obs[j], r_obs[0]), i
                assert (reward[j], terminated[j], truncated[j]) == (r_reward[0], r_terminated[0], r_truncated[0])
            self.last[i] = obs[j].copy()
        return int(restarted.sum())

    def _restart_replica(self, i, obs):
        """The fresh env was reset with the seed ``restart_seed`` derives."""
        self.replicas[i].close()
        self.replicas[i], first = _replica(restart_seed(self.seed + i, self.restarts[i]), self.mode)
        assert np.array_equal(obs, first), i

    def close(self):
        for replica in self.replicas:
            replica.close()


@pytest.mark.parametrize("envs_per_server, mode", [(1, "NextStep"), (2, "NextStep"), (2, "SameStep")])
def test_random_kills_during_async_batches_leave_every_env_on_its_own_trajectory(envs_per_server, mode):
    num_envs, batch_size, recvs, seed = 8, 4, 3000, 321
    envs = portal_shm.make_vec(
        "CartPole-v1",
        num_envs,
        vector_kwargs={
            "batch_size": batch_size,
            "envs_per_server": envs_per_server,
            "autoreset_mode": mode,
            "on_env_failure": "restart",
            "max_restarts": 50,
            "step_timeout": 60,
        },
    )
    rng = np.random.default_rng(envs_per_server)
    kill_at = set(rng.choice(np.arange(50, recvs - 100), size=12, replace=False).tolist())
    killed, restarted, expected = set(), 0, None
    try:
        obs, infos = envs.reset(seed=seed)
        expected = BatchReplicas(num_envs, seed, mode, obs, infos)
        ids = infos["env_id"]
        for t in range(recvs):
            actions = rng.integers(0, 2, batch_size)
            timer = None
            if t in kill_at:
                pids = _server_pids(envs)
                if t % 2:  # any server, between calls: stepping, finished or waiting for actions
                    victim = pids[int(rng.integers(len(pids)))]
                    os.kill(victim, signal.SIGKILL)
                else:  # a server of the batch sent now, most likely in the middle of its step
                    victim = pids[int(ids[0]) // envs_per_server]
                    timer = threading.Timer(0.0002, os.kill, (victim, signal.SIGKILL))
                    timer.start()
                killed.add(victim)
            envs.send(actions, ids)
            expected.sent(actions, ids)
            result = envs.recv()
            if timer is not None:
                timer.join()
            restarted += expected.check(result)
            ids = result[4]["env_id"]
        # every server killed was restarted once, all its envs with it, and nothing else was
        assert restarted == sum(expected.restarts) == envs_per_server * len(killed)
        assert envs.restarts == expected.restarts
    finally:
        envs.close()
        if expected is not None:
            expected.close()


def test_restart_budget_is_enforced_per_env_in_async_batches():
    specs = [EnvSpec(FAULTY, {"fault": "none"}), EnvSpec(FAULTY, {"fault": "exit", "phase": "step", "after": 2})]
    envs = VectorPortal(specs, on_env_failure="restart", max_restarts=2, step_timeout=20, batch_size=1)
    try:
        envs.reset(seed=0)
        outcomes = []
        deadline = time.monotonic() + 20  # env 0 keeps the batches coming: the deaths show within 50 ms
        with pytest.raises(portal_shm.errors.RestartLimitError, match=r"envs \[1\] failed after 2 restarts") as info:
            while time.monotonic() < deadline:
                _, _, _, _, infos = envs.step(np.zeros(1, np.int64))
                if infos["env_id"][0] == 1:
                    outcomes.append(bool(infos.get("_env_restarted", [False])[0]))
        assert outcomes.count(True) == 2  # two restarts, the third failure raised
        assert "exit code 7" in str(info.value)
        with pytest.raises(portal_shm.PortalError, match="cannot continue"):
            envs.step(np.zeros(1, np.int64))
    finally:
        envs.close()


@pytest.mark.parametrize("fault, mode", [("raise", "NextStep"), ("raise", "SameStep"), ("hang", "NextStep")])
def test_a_failing_env_restarts_in_async_batches(fault, mode):
    """Envs 2 and 3 (one server) fail in their 3rd step: they end and restart, envs 0 and 1 step on."""
    faulty = {"fault": fault, "phase": "step", "after": 3}
    specs = [EnvSpec(FAULTY, {"fault": "none"})] * 2 + [EnvSpec(FAULTY, faulty)] * 2
    envs = VectorPortal(
        specs, batch_size=2, envs_per_server=2, autoreset_mode=mode, on_env_failure="restart", step_timeout=1.0
    )
    try:
        _, infos = envs.reset(seed=0)
        sent = 0  # steps of envs 2 and 3 since their reset (the reset's batch comes with 0)
        batches_after_restart = None
        deadline = time.monotonic() + 20
        while batches_after_restart != 2 and time.monotonic() < deadline:
            sent += infos["env_id"][0] == 2
            obs, reward, terminated, truncated, infos = envs.step(np.zeros(2, np.int64))
            if infos["env_id"].tolist() == [0, 1]:
                assert (obs == 0.5).all() and (reward == 1).all() and "_env_restarted" not in infos
                continue
            if "_env_restarted" in infos:
                assert sent == 3 and batches_after_restart is None and infos["_env_restarted"].all()
                assert truncated.all() and not terminated.any() and (reward == 0).all()
                cause = "FaultyEnv failed in step on purpose" if fault == "raise" else "step_timeout"
                assert all(cause in text for text in infos["env_failure"])
                if mode == "SameStep":  # the fresh envs' reset observation, the last one in final_obs
                    assert (obs == 0).all() and (np.stack(infos["final_obs"]) == 0.5).all()
                    sent = 0
                else:  # the last observation; the next batch of these envs is their reset
                    assert (obs == 0.5).all()
                    sent = -1
                batches_after_restart = 0
                continue
            if batches_after_restart is not None:
                batches_after_restart += 1
            if sent == 0:
                assert (obs == 0).all()
                if batches_after_restart:  # NextStep's reset after a restart: reward 0, no flags
                    assert (reward == 0).all() and not (terminated | truncated).any()
            else:
                assert (obs == 0.5).all() and (reward == 1).all()
        assert batches_after_restart == 2
        assert envs.restarts == [0, 0, 1, 1]
    finally:
        envs.close()


def test_failures_outside_steps_restart_in_async_batches_too():
    envs = portal_shm.make_vec(
        "CartPole-v1", 4, vector_kwargs={"on_env_failure": "restart", "envs_per_server": 1, "batch_size": 2}
    )
    try:
        envs.reset(seed=1)
        os.kill(_server_pids(envs)[3], signal.SIGKILL)
        obs, infos = envs.reset(seed=1)  # the reset is repeated on a fresh server
        assert infos["env_id"].tolist() == [0, 1] and "_env_restarted" not in infos
        obs, _, _, _, infos = envs.step(np.zeros(2, np.int64))  # the reset's second batch
        assert infos["env_id"].tolist() == [2, 3] and infos["_env_restarted"].tolist() == [False, True]
        _, expected = _replica(4)
        assert np.array_equal(obs[1], expected)
        os.kill(_server_pids(envs)[2], signal.SIGKILL)  # its env waits for actions
        with pytest.raises(portal_shm.errors.ServerDiedError):
            envs.get_attr("gravity")  # the call fails, the server is replaced ...
        for _ in range(4):  # ... and env 2's episode ends in its next step
            _, _, _, truncated, infos = envs.step(np.zeros(2, np.int64))
            if 2 in infos["env_id"]:
                break
        j = infos["env_id"].tolist().index(2)
        assert truncated[j] and infos["_env_restarted"].tolist() == [j == 0, j == 1]
        assert "SIGKILL" in infos["env_failure"][j]
        assert envs.get_attr("gravity") == (9.8,) * 4  # ... and the portal goes on
    finally:
        envs.close()


def test_a_restart_keeps_none_of_the_callers_batches():
    """The failure a restart repairs is kept without its traceback: its frames would hold the
    step's batch (and the private ring slot under it) until the cyclic GC ran."""
    gc.disable()
    envs = portal_shm.make_vec("CartPole-v1", 2, vector_kwargs={"on_env_failure": "restart", "envs_per_server": 1})
    try:
        envs.reset(seed=0)
        victim = _server_pids(envs)[1]
        os.kill(victim, signal.SIGKILL)
        while _pid_alive(victim):
            time.sleep(0.01)
        _, _, _, _, infos = envs.step(np.zeros(2, np.int64))
        assert infos["env_restarted"].tolist() == [False, True]
        del infos
        obs, *_ = envs.step(np.zeros(2, np.int64))
        private = envs._ring.private
        assert [k for k in range(envs.ring_depth) if private.held(k)] == [envs._lockstep.slot]
    finally:
        gc.enable()
        envs.close()


def _pid_alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False
