"""The cap on one control message, at both ends: what a server sends in place of a message over it
(``server/sizes.py``) and how the agent's channel notices a connection its socket dropped
(``agent/local/control.py``). Real ZeroMQ sockets; the env servers' side is in
``tests/integration/test_message_sizes.py``."""

import time

import numpy as np
import pytest
import zmq

import portal_shm
from portal_shm.agent.local.control import DROP_GRACE, ControlChannel
from portal_shm.server import sizes
from portal_shm.wire import protocol as P

CAP = 4096


def _never_dead() -> None:
    pass


@pytest.fixture
def channel(tmp_path, monkeypatch):
    """A channel under a small cap, with a plain DEALER connected as its server."""
    monkeypatch.setattr(P, "MAX_MESSAGE_BYTES", CAP)
    context = zmq.Context()
    ends = ControlChannel(context, f"ipc://{tmp_path}/ctl", lambda: "env server 3 (envs [6, 7])")
    peer = context.socket(zmq.DEALER)
    peer.setsockopt(zmq.LINGER, 0)
    peer.connect(ends.address)
    yield ends, peer
    peer.close()
    ends.close()
    context.term()


def test_the_channel_takes_messages_up_to_its_cap(channel):
    ends, peer = channel
    assert ends.max_message == CAP
    peer.send(P.packb({"cmd": P.REPLY, "pad": b"x" * (CAP - 64)}))
    assert ends.recv(_never_dead, 5.0, "a test")["cmd"] == P.REPLY


@pytest.mark.timeout(60)
@pytest.mark.parametrize("timeout", [None, 30.0])
def test_a_message_over_the_cap_drops_the_connection_and_the_channel_names_the_server(channel, timeout):
    ends, peer = channel
    peer.send(P.packb({"cmd": P.REPLY}))
    ends.recv(_never_dead, 5.0, "a test")  # connected
    peer.send(b"x" * (CAP + 1))
    start = time.monotonic()
    with pytest.raises(portal_shm.errors.ConnectionDroppedError) as info:
        ends.recv(_never_dead, timeout, "a test")
    assert DROP_GRACE <= time.monotonic() - start < DROP_GRACE + 10
    assert "env server 3 (envs [6, 7])" in str(info.value) and "4,096-byte cap" in str(info.value)
    assert isinstance(info.value, portal_shm.errors.ServerProtocolError)


def test_a_server_found_dead_within_the_grace_is_reported_dead(channel):
    ends, peer = channel
    peer.send(b"x" * (CAP + 1))

    def dies_soon() -> None:
        if ends.dropped_at is not None:  # (its exit dropped the connection)
            raise portal_shm.errors.ServerDiedError(3, [6, 7], "exit code 1")

    with pytest.raises(portal_shm.errors.ServerDiedError):
        ends.recv(dies_soon, 30.0, "a test")


def test_a_message_that_fits_is_sent_as_is():
    data = P.packb({"cmd": P.EXTRA, "blobs": {0: b"x" * 100}})
    assert sizes.fitted(data, {}, len(data), "step", [0]) is None


def test_infos_over_the_cap_name_each_env_its_size_and_the_cap():
    blobs = {4: b"x" * 5000, 5: b"y" * 10}
    message = {"cmd": P.EXTRA, "blobs": blobs}
    data = P.packb(message)
    error = P.unpackb(sizes.fitted(data, message, CAP, "step", [4, 5]))
    assert error["cmd"] == P.ERROR and error["kind"] == P.KIND_MESSAGE_TOO_BIG
    assert error["env_index"] == 4 and error["phase"] == "step"
    assert error["message"].startswith("the infos of env 4 are 5,000 bytes encoded, over the 4,096-byte cap")
    (other,) = error["more"]
    assert other["env_index"] == 5
    assert other["message"].startswith(
        f"the infos of env 5 (10 bytes encoded) and of envs 4 make one message of {len(data):,}"
    )


def test_infos_over_the_cap_together_name_the_other_envs_as_runs():
    blobs = {i: b"x" * 1000 for i in (0, 1, 2, 3, 7)}
    error = sizes.too_big({"cmd": P.EXTRA, "blobs": blobs}, 5050, CAP, "step", list(blobs))
    assert [error["env_index"]] + [e["env_index"] for e in error["more"]] == [0, 1, 2, 3, 7]
    assert "and of envs 1-3, 7 make one message of 5,050 bytes beside the step" in error["message"]


def test_a_reset_reply_over_the_cap_names_the_reset():
    error = sizes.too_big({"cmd": P.REPLY, "extras": {2: b"x" * 5000}}, 5020, CAP, "reset", [2])
    assert error["phase"] == "reset" and error["message"].startswith("the infos of env 2 are 5,000 bytes")


def test_a_reply_over_the_cap_names_the_call_and_its_largest_result():
    results = [np.zeros(10, np.uint8), np.zeros(5000, np.uint8)]
    error = sizes.too_big({"cmd": P.REPLY, "results": results}, 5100, CAP, "call('render')", [8, 9])
    assert error["env_index"] == 9 and error["phase"] == "call('render')"
    assert error["message"].startswith("the reply to call('render') is 5,100 bytes (env 9's result: 5,0")


def test_an_error_report_over_the_cap_keeps_its_error_with_its_texts_clipped():
    report = {"cmd": P.ERROR, "env_index": 1, "phase": "step", "type": "ValueError", "message": "m" * 10**6}
    report["more"] = [dict(report, env_index=2)]
    error = sizes.too_big(report, 2 * 10**6, 1 << 20, "step", [1, 2])
    assert error["type"] == "ValueError" and "kind" not in error
    assert len(error["message"]) < sizes.CLIPPED_TEXT + 100 and "clipped" in error["message"]
    assert len(error["more"][0]["message"]) < sizes.CLIPPED_TEXT + 100


def test_any_other_message_over_the_cap_names_what_it_was():
    error = sizes.too_big({"cmd": P.HELLO, "observation_spaces": ["x" * 5000]}, 5100, CAP, "", [0])
    assert error["env_index"] is None and error["message"].startswith("its hello message is 5,100 bytes")


@pytest.mark.parametrize(
    "given, cap",
    [({}, P.MAX_MESSAGE_BYTES), ({"max_message_bytes": 1024}, 1024), ({"max_message_bytes": "x"}, P.MAX_MESSAGE_BYTES)],
)
def test_the_server_takes_the_agents_cap_from_its_config(given, cap):
    assert sizes.cap_of(given) == cap


def test_errors_about_the_cap_keep_their_kind_from_a_remote_host_to_its_agent():
    from portal_shm.remote.error_data import from_data, to_data

    refused = portal_shm.errors.MessageTooBigError(
        1, "step", sizes.ERROR_TYPE, "the infos of env 1 are 9 bytes", "", "pid 5"
    )
    back = from_data(to_data(refused, "process"), "lab:5555", 10, 4)
    assert isinstance(back, portal_shm.errors.MessageTooBigError) and back.env_index == 11
    assert "the infos of env 1 are 9 bytes" in str(back) and "host lab:5555" in str(back)
    dropped = from_data(to_data(portal_shm.errors.ConnectionDroppedError("env server 0: dropped")), "lab:5555", 0, 2)
    assert isinstance(dropped, portal_shm.errors.ConnectionDroppedError)
