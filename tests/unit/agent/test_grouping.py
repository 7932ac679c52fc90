"""How envs are grouped onto env servers (``agent/contract/grouping.py``): the one place that decides."""

import warnings

import pytest

from portal_shm.agent.contract import grouping
from portal_shm.agent.local import env_fns
from portal_shm.agent.local.server_groups import group_envs, plan_groups
from portal_shm.agent.local.spec import EnvSpec
from portal_shm.runtimes.process import ProcessBackend


@pytest.mark.parametrize(
    "num_envs, cores, expected",
    [(1, 8, 1), (8, 8, 1), (9, 8, 2), (16, 8, 2), (3, 1, 3), (10, 4, 3)],
)
def test_lockstep_spreads_the_envs_over_the_cores(num_envs, cores, expected):
    assert grouping.default_envs_per_server(num_envs, cores) == expected
    assert grouping.envs_per_server(num_envs, cores=cores) == expected


@pytest.mark.parametrize(
    "num_envs, batch_size, cores, expected",
    [(16, 8, 4, 4), (16, 8, 2, 8), (16, 4, 2, 4), (12, 6, 4, 3), (8, 3, 2, 1), (16, 2, 16, 1)],
)
def test_batches_take_the_largest_divisor_of_both_that_spreads_over_the_cores(num_envs, batch_size, cores, expected):
    per = grouping.batch_envs_per_server(num_envs, batch_size, cores)
    assert per == expected and batch_size % per == 0 and num_envs % per == 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert grouping.envs_per_server(num_envs, batch_size=batch_size, cores=cores) == expected


def test_a_batch_that_forces_more_servers_than_cores_warns_at_the_callers_line():
    with pytest.warns(UserWarning, match="8 env servers share 2 CPU cores") as caught:
        assert grouping.envs_per_server(8, batch_size=3, cores=2) == 1
    assert caught[0].filename == __file__
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert grouping.envs_per_server(8, batch_size=8, cores=2) == 4  # a batch of all envs is lockstep


def test_what_is_asked_wins_and_max_concurrency_caps_the_servers():
    assert grouping.envs_per_server(16, 5, cores=2) == 5
    assert grouping.envs_per_server(16, 1, max_concurrency=4, cores=64) == 4
    assert grouping.envs_per_server(16, None, max_concurrency=8, cores=64) == 2
    assert grouping.envs_per_server(16, 8, max_concurrency=8, cores=64) == 8
    assert env_fns.envs_per_server(16, None, None) is None  # (the portal's default: decided when grouped)
    assert env_fns.envs_per_server(16, None, 4) == grouping.envs_per_server(16, max_concurrency=4)


def test_consecutive_envs_share_a_server_within_caps_and_likeness():
    assert grouping.group_envs(7, 3) == [[0, 1, 2], [3, 4, 5], [6]]
    assert grouping.group_envs(5, 4, limits=[2] * 5) == [
        [0, 1],
        [2, 3],
        [4],
    ]  # (a backend's cap: each of its envs has it)
    assert grouping.group_envs(3, 4, limits=[None, None, None]) == [[0, 1, 2]]
    assert grouping.group_envs(6, 3, shares=lambda i, first: (i < 2) == (first < 2)) == [[0, 1], [2, 3, 4], [5]]
    assert grouping.server_sizes(10, 4) == [4, 4, 2]


def test_the_servers_a_portal_starts_are_counted_as_grouped():
    assert grouping.server_count(9, cores=4) == 3
    assert grouping.server_count(8, batch_size=3, cores=2) == 8  # (without the portal's warning)
    assert grouping.server_count(10, 4) == 3
    assert grouping.server_count(10, 10) == 1
    assert grouping.server_count(3) == len(grouping.server_sizes(3, grouping.envs_per_server(3)))


def test_batches_need_servers_of_one_size_that_divides_the_batch():
    grouping.check_batches([[0, 1], [2, 3]], 2, 4)
    grouping.check_batches([[0, 1, 2], [3]], None, 4)  # lockstep takes any servers
    grouping.check_batches([[0, 1, 2], [3]], 4, 4)  # so does a batch of all envs
    with pytest.raises(ValueError, match=r"grouped into servers of \[1, 3\] envs"):
        grouping.check_batches([[0, 1, 2], [3]], 2, 4)
    assert grouping.server_sizes_error([2, 2], 3, 4) is not None


def test_plan_servers_is_the_whole_decision():
    assert grouping.plan_servers(8, 2, batch_size=4) == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert grouping.plan_servers(4, 4, max_concurrency=1) == [[0, 1, 2, 3]]
    with pytest.raises(ValueError, match="batch_size=4 must be a multiple"):
        grouping.plan_servers(8, 3, batch_size=4)
    with pytest.raises(ValueError, match="batch_size=2 must be a multiple"):  # checked after the cap
        grouping.plan_servers(8, 2, batch_size=2, max_concurrency=2)


def test_the_local_portal_groups_its_specs_by_this_decision():
    cart, pole = EnvSpec("CartPole-v1"), EnvSpec("Pendulum-v1", backend=ProcessBackend())
    specs = [cart, cart, cart, pole, pole]
    assert group_envs(specs, 2) == [[0, 1], [2], [3, 4]]
    assert group_envs(specs, None) == grouping.group_envs(
        5, grouping.envs_per_server(5), shares=lambda i, first: specs[i].shares_server_with(specs[first])
    )


def test_batches_and_max_concurrency_group_specs_in_one_call():
    specs = [EnvSpec("CartPole-v1")] * 8
    assert plan_groups(specs, None, batch_size=4, max_concurrency=2) == [[0, 1, 2, 3], [4, 5, 6, 7]]
    mixed = [EnvSpec("CartPole-v1")] * 3 + [EnvSpec("Pendulum-v1")] * 5
    with pytest.raises(ValueError, match=r"grouped into servers of \[1, 2\] envs"):
        plan_groups(mixed, 2, batch_size=2)
