"""Spares forked from zygotes: the same transitions as fresh spares and as no recycling, envs that
are unsafe to fork started fresh, and nothing left behind when the agent dies."""

import os
import signal
import subprocess
import sys
import textwrap
import time
import warnings

import numpy as np
import pytest

import portal_shm
from testkit.compare import assert_same, snapshot, without_recycled

pytestmark = pytest.mark.integration

LEAKY = "portal_shm.server.example_envs:LeakyEnv"
THREADING = "portal_shm.server.example_envs:ThreadingEnv"


def _rollout(envs, seed, steps=None, recycles=0, limit=3000):
    """Seeded random steps: ``steps`` of them, or until every env was recycled ``recycles`` times."""
    envs.action_space.seed(seed)
    records = [snapshot(envs.reset(seed=seed))]
    while len(records) <= (steps if steps is not None else limit):
        records.append(snapshot(envs.step(envs.action_space.sample())))
        if steps is None and min(envs.recycles) >= recycles:
            # A server that retired in this step was swapped after it: the next step flags its envs.
            records.append(snapshot(envs.step(envs.action_space.sample())))
            break
    return records


def _recycled_run(env_id, spare, recycles=3, seed=5, **kwargs):
    vector = {"envs_per_server": 2, "recycle": {"episodes": 3, "spare": spare}}
    envs = portal_shm.make_vec(env_id, 4, leak_mb=0.0, step_ms=1.0, vector_kwargs=vector, **kwargs)
    try:
        records = _rollout(envs, seed, recycles=recycles)
        runtimes = [server["runtime"] for server in envs.servers]
        counted = list(envs.recycles)
    finally:
        envs.close()
    flags = [record[4].get("env_recycled", np.zeros(4, bool)) for record in records[1:]]
    return without_recycled(records), np.array(flags), runtimes, counted


def _reference(env_id, steps, seed=5):
    envs = portal_shm.make_vec(env_id, 4, leak_mb=0.0, step_ms=1.0, vector_kwargs={"envs_per_server": 2})
    try:
        return _rollout(envs, seed, steps=steps)
    finally:
        envs.close()


def test_forked_and_fresh_spares_give_every_transition_of_a_run_without_recycling():
    forked, recycled, runtimes, recycles = _recycled_run(LEAKY, "fork")
    fresh, _, fresh_runtimes, fresh_recycles = _recycled_run(LEAKY, "start", recycles=1)
    assert min(recycles) >= 3 and min(fresh_recycles) >= 1, (recycles, fresh_recycles)
    assert_same(forked, _reference(LEAKY, len(forked) - 1))
    assert_same(fresh, _reference(LEAKY, len(fresh) - 1))
    assert list(recycled.sum(axis=0)) == recycles
    assert all("forked from a zygote" in runtime for runtime in runtimes), runtimes
    assert not any("zygote" in runtime for runtime in fresh_runtimes), fresh_runtimes


def test_envs_whose_threads_outlive_them_are_not_forked_but_started_fresh_with_a_warning():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        records, _, runtimes, recycles = _recycled_run(THREADING, "fork", recycles=2, stop_on_close=False)
    texts = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    assert any("start as fresh runtimes, not forks: 2 Python thread(s);" in text for text in texts), texts
    assert min(recycles) >= 2, recycles
    assert not any("zygote" in runtime for runtime in runtimes), runtimes
    assert_same(records, _reference(THREADING, len(records) - 1))


def test_envs_whose_threads_end_as_they_close_are_forked_and_each_spare_makes_its_own():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        records, _, runtimes, recycles = _recycled_run(THREADING, "fork", recycles=2)
    assert not [w for w in caught if "not forks" in str(w.message)]
    assert min(recycles) >= 2, recycles
    assert all("forked from a zygote" in runtime for runtime in runtimes), runtimes
    assert_same(records, _reference(THREADING, len(records) - 1))


AGENT = textwrap.dedent("""
    import time, numpy as np, portal_shm
    envs = portal_shm.make_vec(
        "portal_shm.server.example_envs:LeakyEnv", 2, leak_mb=0.0,
        vector_kwargs={"envs_per_server": 1, "recycle": {"episodes": 1}},
    )
    envs.reset(seed=0)
    session = envs._session
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        envs.step(np.ones(2, np.int64))
        forked = [s.handle for s in session.servers if "forked" in s.runtime()]
        if len(forked) == 2 and all(h.host_pid() for h in forked) and session.zygotes.links:
            break
    zygote = next(iter(session.zygotes.links.values())).handle.host_pid()
    print(envs.tag, zygote, " ".join(str(h.host_pid()) for h in forked), flush=True)
    while True:
        envs.step(np.ones(2, np.int64))
""")


def _gone(pid):
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rpartition(")")[2].split()[0] == "Z"
    except OSError:
        return True


@pytest.mark.parametrize("kill", ["SIGKILL", "close"])
def test_no_zygote_or_forked_server_outlives_its_agent(kill):
    from portal_shm.runtimes.resources import run_base_dir

    script = (
        AGENT
        if kill == "SIGKILL"
        else AGENT.replace("while True:\n    envs.step(np.ones(2, np.int64))", "envs.close()")
    )
    process = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        tag, *pids = process.stdout.readline().split()
        assert len(pids) == 3, pids
        pids = [int(pid) for pid in pids]
        if kill == "SIGKILL":
            time.sleep(0.3)
            process.send_signal(signal.SIGKILL)
        process.wait(timeout=30)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and not (all(_gone(p) for p in pids) and not _left(tag, run_base_dir())):
            time.sleep(0.1)
        assert all(_gone(p) for p in pids), [p for p in pids if not _gone(p)]
        assert not _left(tag, run_base_dir())
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def _left(tag, base):
    shm = [name for name in os.listdir("/dev/shm") if tag in name]
    return shm + [name for name in os.listdir(base) if name.startswith(tag)]


def test_servers_forked_from_a_zygote_start_without_their_predecessors_leak():
    envs = portal_shm.make_vec(LEAKY, 2, leak_mb=20.0, vector_kwargs={"envs_per_server": 1, "recycle": {"episodes": 4}})
    try:
        envs.reset(seed=0)
        rng = np.random.default_rng(0)
        deadline = time.monotonic() + 60
        while min(envs.recycles) < 2 and time.monotonic() < deadline:
            envs.step(rng.integers(0, 3, 2))
        servers = envs.stats()["servers"]
        forked = [server["runtime"] for server in envs.servers]
    finally:
        envs.close()
    assert min(envs.recycles) >= 2
    # 20 MiB leaked per reset, each server recycled every ~4 episodes: far less than 20 x episodes
    assert all(server["rss_mb"] is not None and server["rss_mb"] < 300 for server in servers), servers
    assert all("forked from a zygote" in runtime for runtime in forked), forked


def test_spares_of_servers_with_env_kwargs_larger_than_a_zygote_frame_are_forked_all_the_same():
    """Each fork's config goes as a private file beside the zygote's socket, as every server's does:
    env kwargs past a frame's limit fork as any other, and nothing stays behind (a spare being forked
    may hold its file a moment: the run directory goes at close)."""
    from portal_shm.runtimes.resources import run_base_dir
    from portal_shm.wire.zygote_frames import MAX_FRAME

    payload = bytes(MAX_FRAME + (1 << 20))
    vector = {"envs_per_server": 2, "recycle": {"episodes": 1, "spare": "fork"}}
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # ("spares ... start as fresh runtimes, not forks")
        envs = portal_shm.make_vec(
            "portal_shm.server.example_envs:PayloadEnv", 4, payload=payload, episode_length=3, vector_kwargs=vector
        )
        try:
            envs.reset(seed=0)
            deadline = time.monotonic() + 120
            while min(envs.recycles) < 2 and time.monotonic() < deadline:
                envs.step(np.zeros(4, np.int64))
            runtimes = [server["runtime"] for server in envs.servers]
            lengths = envs.get_attr("payload_length")
            run_dir = os.path.join(run_base_dir(), envs.tag)
        finally:
            envs.close()
    assert min(envs.recycles) >= 2, envs.recycles
    assert all("forked from a zygote" in runtime for runtime in runtimes), runtimes
    assert lengths == (len(payload),) * 4 and not os.path.exists(run_dir)
