"""A host or Ray address where nothing listens, or whose name does not resolve, fails within ~2 s
naming the address and the cause; one that accepts but stays silent is still waited for.

Loopback only: a port of 127.0.0.1 that was just closed, and a name under ``.invalid`` (a name
that never resolves, RFC 2606).
"""

import socket
import time
import warnings

import pytest

import portal_shm
from portal_shm.remote.client import reach

NO_SUCH_HOST = "no-such-host.invalid"


@pytest.fixture
def closed_port():
    """A port of 127.0.0.1 where nothing listens (bound once, then closed)."""
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    return port


@pytest.fixture
def silent_port():
    """A port of 127.0.0.1 that accepts connections (the kernel does) and never says a word."""
    listener = socket.create_server(("127.0.0.1", 0))
    yield listener.getsockname()[1]
    listener.close()


def _fails_fast(make, match):
    started = time.monotonic()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # insecure=True's warning is not what is tested here
        with pytest.raises(portal_shm.PortalError, match=match):
            make()
    return time.monotonic() - started


def test_a_refused_host_fails_within_two_seconds_naming_address_and_cause(closed_port):
    took = _fails_fast(
        lambda: portal_shm.make_vec(
            "CartPole-v1", 1, backend="remote", hosts=[f"tcp://127.0.0.1:{closed_port}"], insecure=True
        ),
        rf"cannot reach env host tcp://127\.0\.0\.1:{closed_port}: connection refused at 127\.0\.0\.1:{closed_port}; "
        r"is `portal-shm host",
    )
    assert took < 2.0


def test_a_host_name_that_does_not_resolve_fails_within_two_seconds():
    took = _fails_fast(
        lambda: portal_shm.make_vec(
            "CartPole-v1", 1, backend="remote", hosts=[f"tcp://{NO_SUCH_HOST}:5555"], insecure=True
        ),
        rf"cannot reach env host tcp://{NO_SUCH_HOST}:5555: cannot resolve {NO_SUCH_HOST} .*check the name in hosts=",
    )
    assert took < 2.0


def test_one_refused_host_among_several_is_named(closed_port, silent_port):
    hosts = [f"tcp://127.0.0.1:{silent_port}", f"tcp://127.0.0.1:{closed_port}"]
    took = _fails_fast(
        lambda: portal_shm.make_vec("CartPole-v1", 2, backend="remote", hosts=hosts, insecure=True),
        rf"env host tcp://127\.0\.0\.1:{closed_port}: connection refused",
    )
    assert took < 2.0


def test_a_silent_host_is_still_waited_for_up_to_the_heartbeat_timeout(silent_port):
    """The probe only knows refusals; a port that accepts and never answers is the timeouts' to judge."""
    assert reach.unreachable(f"tcp://127.0.0.1:{silent_port}") is None
    started = time.monotonic()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(portal_shm.errors.HostLostError, match="no connection was ever set up"):
            portal_shm.make_vec(
                "CartPole-v1",
                1,
                backend="remote",
                hosts=[f"tcp://127.0.0.1:{silent_port}"],
                insecure=True,
                heartbeat_interval=0.5,
                heartbeat_timeout=2.0,
            )
    assert time.monotonic() - started >= 2.0


@pytest.mark.parametrize(
    "address, host",
    [("tcp://127.0.0.1:5555", "127.0.0.1"), ("ray://[::1]:10001", "::1"), ("head:6379", "head")],
)
def test_addresses_are_split_into_host_and_port(address, host):
    assert reach.split_host_port(address) == (host, int(address.rsplit(":", 1)[1]))


@pytest.mark.parametrize("scheme", ["", "ray://"])
def test_a_ray_address_that_refuses_fails_within_two_seconds(closed_port, scheme):
    pytest.importorskip("ray")
    address = f"{scheme}127.0.0.1:{closed_port}"
    took = _fails_fast(
        lambda: portal_shm.make_vec("CartPole-v1", 1, backend="ray", address=address),
        rf"cannot join the Ray cluster at {address}: connection refused at 127\.0\.0\.1:{closed_port}; "
        r"is `ray start --head` running there",
    )
    assert took < 2.0


def test_a_ray_head_name_that_does_not_resolve_fails_within_two_seconds():
    pytest.importorskip("ray")
    took = _fails_fast(
        lambda: portal_shm.make_vec("CartPole-v1", 1, backend="ray", address=f"ray://{NO_SUCH_HOST}:10001"),
        rf"cannot join the Ray cluster at ray://{NO_SUCH_HOST}:10001: cannot resolve {NO_SUCH_HOST}",
    )
    assert took < 2.0
