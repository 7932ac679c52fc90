"""A hostile env server: speaks just enough of the protocol to get in, then sends garbage.

Started by ``test_untrusted.GarbageBackend`` as ``python garbage_server.py MODE`` with the
agent's real config; each MODE breaks the protocol in one way (see ``test_untrusted``).
"""

import fcntl
import os
import sys
import time

import msgpack
import numpy as np
import zmq

from portal_shm.wire import protocol as P
from portal_shm.wire.doorbell import Bell, Waiter
from portal_shm.wire.handoff import fetch_descriptors
from portal_shm.wire.launch import CONFIG_ENV_VAR, decode_config
from portal_shm.wire.layout import MAILBOX_FIELDS
from portal_shm.wire.ring import Ring

mode = sys.argv[1]
config = decode_config(os.environ[CONFIG_ENV_VAR])
context = zmq.Context()
sock = context.socket(zmq.DEALER)
sock.connect(config["control_address"])
n = len(config["env_indices"])
BOX = {"kind": "Box", "low": np.zeros(3, np.float32), "high": np.ones(3, np.float32), "shape": [3], "dtype": "<f4"}
ACT = {"kind": "Discrete", "n": 2, "start": 0, "dtype": "<i8"}
CMD, SLOT, STATUS, EXTRA = (MAILBOX_FIELDS.index(f) for f in ("cmd", "slot", "status", "extra"))


def hello(**override):
    message = {
        "cmd": "hello",
        "protocol": P.PROTOCOL_VERSION,
        "server_index": config["server_index"],
        "observation_spaces": [BOX] * n,
        "action_spaces": [ACT] * n,
        "metadata": {},
        "render_mode": None,
    }
    message.update(override)
    sock.send(P.packb(message))


def deep_tuple(depth):
    data = msgpack.packb([])
    for _ in range(depth):
        data = msgpack.packb(msgpack.ExtType(3, data))
    return data


HELLO_MODES = {
    "bytes": lambda: sock.send(os.urandom(64)),
    "not-a-map": lambda: sock.send(msgpack.packb([1, 2, 3])),
    "tuple-bomb": lambda: sock.send(deep_tuple(5000)),
    "bad-dtype": lambda: hello(observation_spaces=[dict(BOX, dtype="|O")] * n),
    "huge-box": lambda: hello(
        observation_spaces=[dict(BOX, shape=[2**20, 2**20], low=np.float32(0), high=np.float32(1))] * n
    ),
    "deep-schema": lambda: hello(observation_spaces=[_nest(40)] * n),
    "negative-n": lambda: hello(action_spaces=[dict(ACT, n=-5)] * n),
    "huge-n": lambda: hello(action_spaces=[dict(ACT, n=2**64 - 1)] * n),
    "wrong-count": lambda: hello(observation_spaces=[BOX] * (n + 3)),
    "metadata-list": lambda: hello(metadata=[1, 2]),
    "wrong-protocol": lambda: hello(protocol=999),
    "silent": lambda: None,
    "error-junk": lambda: sock.send(
        P.packb(
            {
                "cmd": "error",
                "env_index": [1, 2],
                "phase": 7,
                "type": None,
                "message": "x" * 10**6,
                "traceback": b"\x00",
            }
        )
    ),
}


def _nest(depth):
    schema = BOX
    for _ in range(depth):
        schema = {"kind": "Tuple", "spaces": [schema]}
    return schema


if mode in HELLO_MODES:
    HELLO_MODES[mode]()
    time.sleep(60)
    sys.exit(0)

hello()
attach = P.unpackb(sock.recv())
if mode == "bad-ready":
    sock.send(P.packb({"cmd": "reply", "results": "nope"}))
    time.sleep(60)
    sys.exit(0)
segment, go_end, done_end = fetch_descriptors(attach["segment"], config["ring_token"], 3, 10.0)
ring = Ring(attach["layout"], segment)
views = ring.views
go, done = Waiter(go_end), Bell(done_end)
mailbox = views["mailbox"][config["server_index"]]
if mode == "truncate":
    # the agent's mapping must survive whatever a server does to the segment
    size = os.fstat(ring.fd).st_size
    for attempt in (
        lambda: os.ftruncate(ring.fd, 0),
        lambda: os.ftruncate(ring.fd, size * 4),
        lambda: fcntl.fcntl(ring.fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_WRITE),
    ):
        try:
            attempt()
            print("the segment let a server change it", flush=True)
            sys.exit(9)
        except PermissionError:
            pass
sock.send(P.packb({"cmd": "ready"}))
if mode == "close-bells":
    go.close()
    done.close()
    time.sleep(60)
while True:
    while not go.wait(60):
        pass
    if mailbox[CMD] == P.CMD_CONTROL:
        message = P.unpackb(sock.recv())
        if message["cmd"] == "close":
            sock.send(P.packb({"cmd": "reply"}))
            break
        if mode == "reset-bad-results":
            sock.send(P.packb({"cmd": "reply", "extras": {"0": 5}, "results": "x"}))
        elif mode == "reset-unknown-cmd":
            sock.send(P.packb({"cmd": "hello"}))
        else:
            for i in config["env_indices"]:
                views["info_len"][message["slot"], i] = 0
            sock.send(P.packb({"cmd": "reply"}))
        continue
    k = int(mailbox[SLOT])
    i = config["env_indices"][0]
    if mode == "step-ring-pending":
        # rings nonstop and never replaces its PENDING status: the agent must still time out
        end = time.monotonic() + 30
        while time.monotonic() < end:
            done.ring()
            time.sleep(0.0001)
        continue
    views["obs.0"][k, i] = np.nan  # wrong observations are the worst a server may cause
    status = 0
    mailbox[EXTRA] = 0
    if mode == "step-info-len":
        views["info_len"][k, i] = 10**12
    elif mode == "step-info-corrupt":
        views["info_len"][k, i] = 8
        views["info"][k, i, :8] = np.frombuffer(b"\xc1" * 8, np.uint8)
    elif mode == "step-info-shape":
        blob = P.packb([{"a": 1}, 5])
        views["info_len"][k, i] = len(blob)
        views["info"][k, i, : len(blob)] = np.frombuffer(blob, np.uint8)
    elif mode == "step-extra-blobs":
        views["info_len"][k, i] = -1
        mailbox[EXTRA] = 1
        sock.send(P.packb({"cmd": "extra", "blobs": {999: "x", "y": [1]}}))
    elif mode == "step-status-no-message":
        status = 1  # claims an error but never sends it: the step times out
    elif mode == "step-flood":
        views["info_len"][k, i] = 0
        mailbox[STATUS] = status
        for _ in range(1000):
            done.ring()
        continue
    else:
        views["info_len"][k, i] = 0
    # the status word last, as a real server writes it: an agent that watches the ring (spin_wait)
    # reads the step as soon as it changes, so garbage written after it would go unseen this step
    mailbox[STATUS] = status
    done.ring()
sock.close(0)
context.term()
