"""The recycle policy: its option checked with errors naming the fix, and the rules' decisions."""

import numpy as np
import pytest

from portal_shm.agent.contract.options import DEFAULT_MAX_PER_STEP, DEFAULT_WAIT_STEPS, RecyclePolicy, check_recycle
from portal_shm.agent.recycle.recycler import recycle_seed
from portal_shm.agent.recycle.wear import EARLY_SAMPLES, ROLL_SAMPLES, Wear
from portal_shm.errors import HostPolicyError
from portal_shm.remote.host.request_values import check_vector_options


def test_a_valid_option_becomes_a_policy_with_defaults():
    policy = check_recycle({"episodes": 20, "rss_mb": 512, "seconds": 60, "slowdown": 3, "jitter": 0.1})
    assert policy == RecyclePolicy(20, 512.0, 60.0, 3.0, 0.1, DEFAULT_WAIT_STEPS, DEFAULT_MAX_PER_STEP)
    assert check_recycle(None) is None
    assert check_recycle(policy) is policy
    assert check_recycle(policy.as_dict()) == policy
    assert policy.spare == "fork" and check_recycle({"episodes": 1, "spare": "start"}).spare == "start"


@pytest.mark.parametrize(
    "value, error, match",
    [
        ([("episodes", 3)], TypeError, "recycle must be a dict"),
        ({"episode": 3}, ValueError, "takes the keys episodes, .*unknown: episode"),
        ({"jitter": 0.1}, ValueError, "needs at least one rule of episodes, rss_mb, seconds, slowdown"),
        ({"episodes": 0}, ValueError, r"recycle\['episodes'\] must be an integer >= 1, got 0"),
        ({"episodes": 2.5}, ValueError, r"recycle\['episodes'\] must be an integer"),
        ({"episodes": True}, ValueError, r"recycle\['episodes'\] must be an integer"),
        ({"rss_mb": -1}, ValueError, r"recycle\['rss_mb'\] must be a number > 0"),
        ({"seconds": float("inf")}, ValueError, r"recycle\['seconds'\] must be a number > 0"),
        ({"slowdown": 1.0}, ValueError, r"recycle\['slowdown'\] must be a number > 1"),
        ({"episodes": 5, "jitter": 1.0}, ValueError, r"recycle\['jitter'\] must be below 1"),
        ({"episodes": 5, "jitter": -0.1}, ValueError, r"recycle\['jitter'\] must be a number >= 0"),
        ({"episodes": 5, "max_per_step": 0}, ValueError, r"recycle\['max_per_step'\] must be an integer >= 1"),
        ({"episodes": 5, "wait_steps": -1}, ValueError, r"recycle\['wait_steps'\] must be an integer >= 0"),
        ({"episodes": 5, "spare": "clone"}, ValueError, r"recycle\['spare'\] is 'fork' .* or 'start' .*got 'clone'"),
    ],
)
def test_invalid_options_name_the_key_and_what_is_valid(value, error, match):
    with pytest.raises(error, match=match):
        check_recycle(value)


def test_an_env_host_checks_the_option_as_a_local_portal_does():
    assert check_vector_options({"recycle": {"episodes": 5}}, 4) == {"recycle": {"episodes": 5}}
    with pytest.raises(HostPolicyError, match=r"vector_kwargs recycle=.*a recycle policy .*unknown: bogus"):
        check_vector_options({"recycle": {"bogus": 1}}, 4)


def _wear(now=0.0, seed=0, **policy):
    return Wear(check_recycle(policy), np.random.default_rng(seed), now=now)


def test_episodes_rule_is_due_at_its_limit_and_warms_the_spare_before():
    wear = _wear(episodes=10)
    assert wear.episode_limit == 10
    for episodes, near, due in [(0, False, False), (7, True, False), (9, True, False), (10, True, True)]:
        wear.episodes = episodes
        assert (wear.near(0.0), wear.due(0.0)) == (near, due), episodes
    assert "10 episodes" in wear.progress(0.0)[1]
    # a limit of one episode warms its spare from the start
    assert _wear(episodes=1).near(0.0)


def test_due_after_says_when_the_next_episode_ends_make_a_server_due_by_the_episode_rule():
    # A server is asked to retire in the step whose episode ends make it due (``CMD_RETIRE``).
    wear = _wear(episodes=4)
    assert wear.episode_limit == 4
    wear.episodes = 2
    assert not wear.due_after(1) and wear.due_after(2)  # one env, or two ending together
    wear.episodes = 4
    assert wear.due_after(0)
    assert not _wear(seconds=10.0).due_after(100)  # only the episode rule counts episodes


def test_jitter_spreads_the_limits_of_servers_started_together():
    limits = {_wear(seed=seed, episodes=100, jitter=0.1).episode_limit for seed in range(64)}
    assert min(limits) >= 90 and max(limits) <= 110 and len(limits) > 10
    seconds = [_wear(seed=seed, seconds=100.0, jitter=0.2).seconds_limit for seed in range(64)]
    assert 80 <= min(seconds) < max(seconds) <= 120
    assert {_wear(seed=seed, episodes=100).episode_limit for seed in range(8)} == {100}


def test_seconds_and_rss_rules():
    wear = _wear(now=100.0, seconds=60.0, rss_mb=200.0)
    assert not wear.near(140.0) and wear.near(150.0) and not wear.due(159.0) and wear.due(160.0)
    wear = _wear(now=0.0, rss_mb=200.0)
    assert not wear.near(0.0)  # nothing measured yet
    wear.observe(150.0, 0, 0)
    assert not wear.near(0.0)
    wear.observe(170.0, 0, 0)
    assert wear.near(0.0) and not wear.due(0.0)
    wear.observe(201.0, 0, 0)
    assert wear.due(0.0) and "RSS 201 MiB" in wear.progress(0.0)[1]


def test_slowdown_compares_the_rolling_step_time_with_the_early_one():
    wear = _wear(slowdown=2.0)
    samples, total = 0, 0

    def feed(count, ns_each):
        nonlocal samples, total
        samples, total = samples + count, total + count * ns_each
        wear.observe(None, samples, total)

    feed(EARLY_SAMPLES, 1000)
    assert wear.early_ns == 1000 and wear.rolling_ns is None and not wear.near(0.0)
    feed(ROLL_SAMPLES - 1, 5000)  # not a whole window yet
    assert wear.rolling_ns is None
    feed(1, 5000)
    assert wear.rolling_ns == 5000 and wear.due(0.0)
    feed(ROLL_SAMPLES, 1500)  # only the last window counts
    assert wear.rolling_ns == 1500 and not wear.near(0.0)
    feed(ROLL_SAMPLES, 1900)
    assert wear.near(0.0) and not wear.due(0.0)
    # counts that start again from 0 (a fresh server's) start the windows again
    wear.observe(None, 3, 3000)
    assert wear.rolling_ns == 1900


def test_recycle_seed_is_derived_from_the_seed_and_the_count():
    assert recycle_seed(None, 1) is None
    seeds = {recycle_seed(5, n) for n in range(1, 5)} | {recycle_seed(6, 1)}
    assert len(seeds) == 5 and recycle_seed(5, 1) == recycle_seed(5, 1)
