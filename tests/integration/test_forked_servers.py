"""Servers forked from a warm zygote at start-up (``server_start="fork"``, the default): each is a
process of its own that steps exactly as a fresh one, shares nothing with its siblings that a new
process would not (seeds, generators, sockets), and nothing is left once the portal closes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time
import warnings

import numpy as np
import pytest

import portal_shm
from testkit.compare import assert_same, snapshot
from testkit.procs import alive, eventually, pid_gone, wait_gone

pytestmark = pytest.mark.integration

WALK = "portal_shm.server.example_envs:RandomWalkEnv"
THREADING = "portal_shm.server.example_envs:ThreadingEnv"


def _runtimes(envs) -> list[str]:
    return [server["runtime"] for server in envs.servers]


def _rollout(envs, seed: int, steps: int) -> list:
    envs.action_space.seed(seed)
    records = [snapshot(envs.reset(seed=seed))]
    for _ in range(steps):
        records.append(snapshot(envs.step(envs.action_space.sample())))
    return records


@pytest.mark.parametrize("batch_size", [None, 3], ids=["lockstep", "batches"])
def test_forked_servers_step_exactly_as_fresh_ones(batch_size):
    runs = {}
    for start in ("fork", "fresh"):
        vector = {"envs_per_server": 1, "server_start": start}
        if batch_size is None:
            envs = portal_shm.make_vec(WALK, 6, vector_kwargs=vector)
        else:
            envs = portal_shm.make_vec("CartPole-v1", 6, vector_kwargs=vector)
        try:
            runtimes = _runtimes(envs)
            runs[start] = _rollout(envs, 7, 120)
        finally:
            envs.close()
        forked = ["forked from a zygote" in runtime for runtime in runtimes]
        assert all(forked) if start == "fork" else not any(forked), runtimes
    assert_same(runs["fork"], runs["fresh"])


def test_siblings_share_no_generator_pid_or_socket_with_each_other():
    # An env that draws its generator as it is made (as ALE seeds its emulator): the zygote made it
    # once, so every fork holds the same generator; an unseeded reset must not show it.
    envs = portal_shm.make_vec(WALK, 8, draw_at_make=True, vector_kwargs={"envs_per_server": 1})
    try:
        assert all("forked from a zygote" in runtime for runtime in _runtimes(envs))
        pids = [server["pid"] for server in envs.servers]
        assert len(set(pids)) == 8, pids
        first, _ = envs.reset()
        assert len({float(x) for x in first[:, 0]}) == 8, first  # eight draws, not one draw eight times
        for _ in range(5):
            obs, *_ = envs.step(np.ones(8, np.int64))
        assert len({float(x) for x in obs[:, 0]}) == 8, obs
        # a seeded reset is the seed's, in a fork as anywhere
        seeded, _ = envs.reset(seed=[3] * 8)
        assert len({float(x) for x in seeded[:, 0]}) == 1, seeded
        # no fork holds another's control socket: each has its own connection to the agent only
        for pid in pids:
            sockets = [os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")]
            assert sum(target.startswith("socket:") for target in sockets) <= 4, (pid, sockets)
    finally:
        envs.close()
    assert all(not os.path.exists(f"/proc/{pid}") or _zombie(pid) for pid in pids)


def _zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().split(") ")[1].startswith("Z")
    except OSError:
        return True


def test_a_single_server_of_a_kind_starts_fresh_and_server_start_fresh_never_forks():
    envs = portal_shm.make_vec("CartPole-v1", 2, vector_kwargs={"envs_per_server": 2})
    try:
        assert not any("zygote" in runtime for runtime in _runtimes(envs))
    finally:
        envs.close()


def test_envs_whose_threads_outlive_them_are_started_fresh_with_a_warning_naming_the_option():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        envs = portal_shm.make_vec(THREADING, 4, leak_mb=0.0, stop_on_close=False, vector_kwargs={"envs_per_server": 1})
    try:
        assert not any("zygote" in runtime for runtime in _runtimes(envs))
        envs.reset(seed=0)
        envs.step(np.zeros(4, np.int64))
    finally:
        envs.close()
    texts = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    assert any(
        "start as fresh runtimes, not forks: 1 Python thread(s); server_start='fresh'" in text for text in texts
    ), texts


def test_envs_whose_threads_end_as_they_close_fork_servers_that_make_their_own():
    """The zygote closes the envs that started a thread (as ALE's vector env does) and forks once the
    thread ended; each server makes its envs after the fork, so each runs its own thread."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        envs = portal_shm.make_vec(THREADING, 4, leak_mb=0.0, vector_kwargs={"envs_per_server": 1})
    try:
        assert not [w for w in caught if "not forks" in str(w.message)]
        assert all("forked from a zygote" in runtime for runtime in _runtimes(envs))
        envs.reset(seed=0)
        deadline = time.monotonic() + 10
        while min(envs.get_attr("ticks")) == 0 and time.monotonic() < deadline:
            envs.step(np.zeros(4, np.int64))
            time.sleep(0.02)
        assert min(envs.get_attr("ticks")) > 0  # (every server's env thread runs, after its fork)
    finally:
        envs.close()


def test_env_factories_fork_from_a_zygote_that_imported_them_and_each_fork_makes_its_own():
    import gymnasium as gym

    fns = [lambda i=i: gym.make("CartPole-v1", max_episode_steps=50 + i) for i in range(4)]
    envs = portal_shm.VectorPortal(fns, envs_per_server=1)
    try:
        assert all("forked from a zygote" in runtime for runtime in _runtimes(envs)), _runtimes(envs)
        assert [spec.max_episode_steps for spec in envs.get_attr("spec")] == [50, 51, 52, 53]
        reference = gym.vector.SyncVectorEnv(fns)
        try:
            assert_same(_rollout(envs, 3, 60), _rollout(reference, 3, 60))
        finally:
            reference.close()
    finally:
        envs.close()


def test_the_sb3_drop_in_forks_its_one_env_servers():
    pytest.importorskip("stable_baselines3")
    import gymnasium as gym

    from portal_shm.sb3 import SubprocVecEnv

    envs = SubprocVecEnv([lambda: gym.make("CartPole-v1") for _ in range(4)])
    try:
        runtimes = _runtimes(envs.venv)
        assert len(runtimes) == 4 and all("forked from a zygote" in runtime for runtime in runtimes), runtimes
        envs.reset()
        envs.step(np.zeros(4, np.int64))
    finally:
        envs.close()


def test_256_one_env_servers_start_step_in_batches_and_close_leaving_nothing():
    # Hundreds of servers: descriptors above select()'s 1024 in the agent, and all of them fetching
    # their ring from the agent's socket at once (a full backlog answers EAGAIN: they try again).
    envs = portal_shm.make_vec("CartPole-v1", 256, vector_kwargs={"envs_per_server": 1, "batch_size": 128})
    try:
        pids = [server["pid"] for server in envs.servers]
        assert len(set(pids)) == 256
        envs.async_reset()
        for _ in range(10):
            _, _, _, _, infos = envs.recv()
            envs.send(np.zeros(len(infos["env_id"]), np.int64), infos["env_id"])
        envs.recv()
    finally:
        envs.close()
    assert all(not os.path.exists(f"/proc/{pid}") or _zombie(pid) for pid in pids)


def test_forked_ale_envs_draw_their_own_emulator_seeds_and_see_no_seed_of_ours():
    pytest.importorskip("ale_py")
    envs = portal_shm.make_vec("ALE/Pong-v5", 4, vector_kwargs={"envs_per_server": 1})
    try:
        assert all("forked from a zygote" in runtime for runtime in _runtimes(envs))
        _, infos = envs.reset()
        assert "seeds" not in infos  # (ALE reports the seeds of a seeded reset: this one was not)
        for t in range(200):  # sticky actions draw from the emulator's generator: siblings must differ
            obs, *_ = envs.step(np.full(4, 2 + t % 2))
        assert len({frame.tobytes() for frame in obs}) > 1
        envs.reset(seed=[1] * 4)
        for t in range(200):
            obs, *_ = envs.step(np.full(4, 2 + t % 2))
        assert len({frame.tobytes() for frame in obs}) == 1
    finally:
        envs.close()


AGENT_FORK = textwrap.dedent("""
    import json, os, sys, threading, time
    import numpy as np, gymnasium as gym, portal_shm
    if sys.argv[1] == "thread":
        threading.Thread(target=time.sleep, args=(60,), daemon=True).start()
    from portal_shm.runtimes.agent_fork import why_not
    why = why_not()
    envs = portal_shm.make_vec("CartPole-v1", 4, vector_kwargs={"envs_per_server": 1})
    (zygote,) = envs._session.zygotes.links.values()
    sync = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1")] * 4)
    obs, _ = envs.reset(seed=5)
    expected, _ = sync.reset(seed=5)
    same = bool(np.array_equal(obs, expected))
    for t in range(300):
        actions = np.array([t % 2, 1, 0, (t // 3) % 2])
        obs, reward, terminated, truncated, _ = envs.step(actions)
        expected, r2, te2, tr2, _ = sync.step(actions)
        same = same and bool(np.array_equal(obs, expected) and np.array_equal(terminated, te2))
    print(json.dumps({"handle": type(zygote.handle).__name__, "zygote": zygote.handle.host_pid(),
                      "servers": [s["pid"] for s in envs.servers], "same": same, "tag": envs.tag, "why": why}), flush=True)
    if sys.argv[1] == "killed":
        time.sleep(60)
    envs.close()
    print("closed", flush=True)
""")


def leftovers() -> list:
    """/dev/shm entries and run folders (where the agent's temporary files go)."""
    return os.listdir("/dev/shm") + os.listdir(tempfile.gettempdir())


def _agent(mode: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", AGENT_FORK, mode], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def test_a_quiet_agent_forks_its_zygote_and_its_servers_step_as_sync_vector_env():
    agent = _agent("quiet")
    out, err = agent.communicate(timeout=120)
    assert agent.returncode == 0, err
    report = json.loads(out.splitlines()[0])
    assert report["handle"] == "AgentForkHandle" and report["same"], (report["why"], err)
    assert out.splitlines()[1] == "closed"
    assert all(pid_gone(pid) for pid in [report["zygote"], *report["servers"]])
    assert not [name for name in leftovers() if report["tag"] in name]


def test_an_agent_running_a_thread_starts_its_zygote_as_a_fresh_interpreter():
    agent = _agent("thread")
    out, err = agent.communicate(timeout=120)
    assert agent.returncode == 0, err
    report = json.loads(out.splitlines()[0])
    assert report["handle"] == "ProcessHandle" and report["same"], report


def test_the_zygote_forked_from_a_killed_agent_and_its_servers_exit_leaving_nothing():
    agent = _agent("killed")
    try:
        report = json.loads(agent.stdout.readline())
        assert report["handle"] == "AgentForkHandle"
        pids = [report["zygote"], *report["servers"]]
        assert all(alive(pid) for pid in pids)
        agent.kill()
        agent.wait(10)
        assert wait_gone(pids, 30) < 30, [pid for pid in pids if not pid_gone(pid)]
        assert eventually(lambda: not [name for name in leftovers() if report["tag"] in name], 10)
    finally:
        agent.kill()
        agent.communicate()
