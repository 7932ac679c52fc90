"""``RayBackend``: placement arithmetic and the checks that fail before any Ray call."""

import pytest

import portal_shm
from portal_shm.cluster.backend import RayBackend
from portal_shm.errors import PortalError
from portal_shm.remote.client.backend import split_envs


def test_one_host_per_node_strictly_spread_by_default():
    assert RayBackend().placement(3) == (3, "STRICT_SPREAD")
    assert RayBackend(num_hosts=2).placement(3) == (2, "STRICT_SPREAD")
    assert RayBackend(hosts_per_node=2).placement(3) == (6, "SPREAD")
    assert RayBackend(num_hosts=5).placement(2) == (5, "SPREAD")
    assert RayBackend(num_hosts=2, strategy="PACK").placement(3) == (2, "PACK")


def test_more_hosts_than_nodes_cannot_be_strictly_spread():
    with pytest.raises(
        PortalError, match="4 env hosts cannot go on distinct nodes: the cluster has 2 alive with 1 CPUs"
    ):
        RayBackend(num_hosts=4, strategy="STRICT_SPREAD").placement(2)


@pytest.mark.parametrize(
    "options, message",
    [
        ({"num_hosts": 0}, "num_hosts=0"),
        ({"hosts_per_node": 0}, "hosts_per_node=0"),
        ({"cpus_per_host": -1}, "cpus_per_host=-1"),
        ({"strategy": "EVERYWHERE"}, "strategy='EVERYWHERE': one of STRICT_SPREAD"),
        ({"placement_timeout": 0}, "placement_timeout must be positive"),
        ({"compression": "gzip"}, "gzip"),
        ({"heartbeat_timeout": 1.0, "heartbeat_interval": 1.0}, "at least twice heartbeat_interval"),
    ],
)
def test_bad_options_are_named(options, message):
    with pytest.raises((PortalError, ValueError), match=message):
        RayBackend(**options).check()


def test_envs_are_split_evenly_or_as_counted():
    assert split_envs(7, 3, None) == [3, 2, 2]
    assert split_envs(4, 2, [1, 3]) == [1, 3]
    with pytest.raises(PortalError, match="must give each of the 2 hosts at least one env"):
        split_envs(4, 2, [4, 0])
    with pytest.raises(PortalError, match="2 envs cannot be spread over 3 hosts"):
        split_envs(2, 3, None)


def test_make_vec_hands_ray_options_to_the_backend_and_rejects_attach():
    with pytest.raises(ValueError, match="runtime='attach'"):
        portal_shm.make_vec("CartPole-v1", 2, backend="ray", runtime="attach")
    with pytest.raises(PortalError, match="strategy='NOPE'"):
        portal_shm.make_vec("CartPole-v1", 2, backend="ray", strategy="NOPE")
