"""``envs.stats()``: counters the servers keep in the ring, and the bottleneck verdict, on real servers."""

from __future__ import annotations

import time

import numpy as np
import pytest

import portal_shm
from portal_shm import VectorPortal
from portal_shm.agent.local.stats_reader import Monotone, latency
from portal_shm.backends import EnvSpec
from portal_shm.wire import stats as S

SLOW = "portal_shm.server.example_envs:SlowEnv"


def run(envs, seconds: float, policy_s: float = 0.0) -> None:
    envs.reset(seed=0)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        envs.step(np.zeros(envs.num_envs, np.int64))
        if policy_s:
            time.sleep(policy_s)


def test_buckets_hold_their_durations_and_quantiles_fall_in_them():
    for ns in (256, 300, 1_000, 12_345, 10**6, 5 * 10**7):
        low, high = S.bucket_bounds(S.bucket(ns))
        assert low <= ns < high
    hist = np.zeros(S.BUCKETS, np.int64)
    for ns in [10_000] * 90 + [1_000_000] * 10:
        hist[S.bucket(ns)] += 1
    q = latency(hist, 100, 90 * 10_000 + 10 * 1_000_000)
    assert 8 <= q["p50"] <= 12 and 800 <= q["p99"] <= 1200 and q["samples"] == 100
    assert latency(np.zeros(S.BUCKETS, np.int64), 0, 0) is None


def test_counts_that_start_again_after_a_restart_carry_their_total_forward():
    totals = Monotone((2,))
    assert totals.update(np.array([5, 7])).tolist() == [5, 7]
    assert totals.update(np.array([2, 9])).tolist() == [7, 9]  # the first restarted from 0
    assert totals.update(np.array([-3, 10])).tolist() == [7, 10]  # a hostile negative reads as 0


def test_stats_count_steps_episodes_and_resets_of_every_env():
    envs = portal_shm.make_vec("CartPole-v1", 4, vector_kwargs={"envs_per_server": 2})
    try:
        envs.reset(seed=0)
        steps = 300
        episodes = np.zeros(4, int)
        for _ in range(steps):
            _, _, terminated, truncated, _ = envs.step(np.zeros(4, np.int64))
            episodes += terminated | truncated
        time.sleep(0.6)  # idle servers copy their counts into the ring within IDLE_CHECK_SECONDS
        stats = envs.stats()
        assert [e["steps"] for e in stats["envs"]] == [steps] * 4
        assert [e["resets"] for e in stats["envs"]] == [1] * 4
        # NextStep: an episode is counted when its env resets, one step after it ended
        for e, ended in zip(stats["envs"], episodes):
            assert ended - 1 <= e["episodes"] <= ended
        assert [s["envs"] for s in stats["servers"]] == [[0, 1], [2, 3]]
        assert all(s["rss_mb"] > 1 and s["pid"] for s in stats["servers"])
        assert all(e["latency_us"]["samples"] >= steps // S.SAMPLE_EVERY - 1 for e in stats["envs"])
        assert stats["since_start"]["steps"] == 4 * steps
        assert stats["ring"]["bytes_per_s"] > 0
    finally:
        envs.close()


def test_a_policy_that_sleeps_reads_as_agent_bound():
    envs = portal_shm.make_vec("CartPole-v1", 2)
    try:
        run(envs, 1.5, policy_s=0.005)
        bound = envs.stats(window=1.0)["bound"]
        assert bound["verdict"] == "agent", bound
    finally:
        envs.close()


def test_envs_that_sleep_read_as_env_bound():
    envs = VectorPortal([EnvSpec(SLOW, {"step_ms": 5})] * 2, envs_per_server=1)
    try:
        run(envs, 1.5)
        bound = envs.stats(window=1.0)["bound"]
        assert bound["verdict"] == "env", bound
        assert bound["figures"]["server_busy"] > 0.6
    finally:
        envs.close()


def test_cheap_envs_with_a_free_policy_read_as_transport_bound():
    envs = portal_shm.make_vec("portal_shm.server.example_envs:NullEnv", 4, shape=(4,))
    try:
        run(envs, 1.5)
        bound = envs.stats(window=1.0)["bound"]
        assert bound["verdict"] == "transport", bound
        assert bound["figures"]["server_busy"] < 0.6
    finally:
        envs.close()


def test_an_env_ten_times_slower_than_its_siblings_is_named_within_five_seconds():
    specs = [EnvSpec(SLOW, {"step_ms": 0.3})] * 3 + [EnvSpec(SLOW, {"step_ms": 3.0})]
    envs = VectorPortal(specs, envs_per_server=1)
    try:
        envs.reset(seed=0)
        start = time.monotonic()
        bound = None
        while time.monotonic() - start < 5:
            run(envs, 0.5)
            bound = envs.stats(window=5.0)["bound"]
            if bound["verdict"] == "straggler":
                break
        assert bound["verdict"] == "straggler" and bound["envs"] == [3], bound
    finally:
        envs.close()


def test_stats_after_close_is_refused():
    envs = portal_shm.make_vec("CartPole-v1", 2)
    envs.close()
    with pytest.raises(Exception, match="closed"):
        envs.stats()


def test_gymnasium_benchmark_vector_step_runs_on_a_portal_unmodified():
    from gymnasium.utils.performance import benchmark_vector_step

    envs = portal_shm.make_vec("CartPole-v1", 2)
    try:
        rate = benchmark_vector_step(envs, target_duration=1, seed=0)
        assert rate > 0
        time.sleep(0.6)
        # its steps (two resets, a warm-up step, then the timed loop) are the servers' counts
        assert envs.stats()["since_start"]["steps"] >= 2 * rate * 0.5
    finally:
        envs.close()
