"""on_env_failure="restart": failed env servers are replaced, the other envs never notice.

Servers are SIGKILLed for real (between steps and in the middle of one); each env is checked
step by step against its own gymnasium SyncVectorEnv replica driven with the same actions, and a
restarted env's new episode against a replica reset with ``restart_seed``.
"""

import os
import signal
import threading

import gymnasium as gym
import numpy as np
import pytest

import portal_shm
from portal_shm import EnvSpec, VectorPortal, restart_seed

FAULTY = "portal_shm.example_envs:FaultyEnv"


def _server_pids(envs) -> dict:
    """server index -> pid of its current process."""
    return {s["server"]: int(s["runtime"].split()[2].rstrip(",")) for s in envs.servers}


def _replica(seed):
    replica = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1")])
    obs, info = replica.reset(seed=seed)
    return replica, obs[0]


def test_random_kills_during_10000_steps_leave_every_env_exactly_as_sync_vector_env():
    num_envs, steps, seed = 8, 10_000, 123
    envs = portal_shm.make_vec("CartPole-v1", num_envs, vector_kwargs={
        "on_env_failure": "restart", "max_restarts": 50, "envs_per_server": 2, "step_timeout": 60})
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
                if restarted[i]:
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
                    r_obs, r_reward, r_terminated, r_truncated, _ = replicas[i].step(actions[i:i + 1])
                    assert np.array_equal(obs[i], r_obs[0]), (t, i)
                    assert reward[i] == r_reward[0] and terminated[i] == r_terminated[0]
                    assert truncated[i] == r_truncated[0]
            last_obs = obs.copy()
        # every kill restarted a server: both envs of it, once each
        assert checked_restarts == sum(restarts) >= 2 * len(kill_at)
        assert envs._recovery.restarts == restarts
    finally:
        envs.close()
        for replica in replicas:
            replica.close()


def test_restart_budget_is_enforced_per_env():
    envs = VectorPortal([EnvSpec(FAULTY, {"fault": "none"}), EnvSpec(FAULTY, {"fault": "exit", "phase": "step", "after": 2})],
                        on_env_failure="restart", max_restarts=2, step_timeout=20)
    try:
        envs.reset(seed=0)
        outcomes = []
        with pytest.raises(portal_shm.RestartLimitError, match=r"envs \[1\] failed after 2 restarts") as info:
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
    envs = portal_shm.make_vec("CartPole-v1", 2, vector_kwargs={
        "on_env_failure": "restart", "envs_per_server": 1, "autoreset_mode": mode, "step_timeout": 30})
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
        with pytest.raises(portal_shm.ServerDiedError):
            envs.get_attr("gravity")  # the call fails, the server is replaced ...
        _, _, _, truncated, infos = envs.step(np.zeros(2, np.int64))
        assert truncated.tolist() == [False, True] and infos["_env_restarted"].tolist() == [False, True]
        assert envs.get_attr("gravity") == (9.8, 9.8)  # ... and the portal goes on
    finally:
        envs.close()
