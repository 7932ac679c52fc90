"""The agent's connection to one env host: a DEALER socket, its keys, numbering and heartbeats.

No thread: the agent's calls drive it. While the agent waits for a host it pings it every
``heartbeat_interval``; any message counts as a sign of life, and ``heartbeat_timeout`` of
silence is ``HostLostError``. Between calls libzmq's own heartbeats keep the connection, so an
agent that spends a minute on its policy does not lose its envs. A socket monitor turns failed
CURVE handshakes into errors that say why (the host refused our key; the pinned host key is not
the host's), which libzmq on its own would retry in silence.
"""

from __future__ import annotations

import itertools
import secrets
import time
from collections import deque
from typing import Any, Optional

import numpy as np
import zmq
from zmq.utils.monitor import parse_monitor_message

from ...agent.contract.kept_views import KeptViews, holders
from ...errors import HostLostError, PortalError, PortalTimeoutError, ServerProtocolError
from .. import frames
from ..messages import BATCH, ERROR, HELLO, PING, PONG, RESET, UNKNOWN_SESSION
from ..reliable import Sequencer

_EVENTS_OPT, _POLLIN = int(zmq.EVENTS), int(zmq.POLLIN)  # plain ints: enum flag arithmetic is Python code
_ARRIVAL = itertools.count()  # batches of all hosts are handed out in the order they arrived

_EVENTS = (
    zmq.EVENT_HANDSHAKE_SUCCEEDED
    | zmq.EVENT_HANDSHAKE_FAILED_AUTH
    | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
    | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL
)


class HostLink:
    """The connection to one host of a RemoteVectorPortal (envs ``offset .. offset + num_envs - 1``
    live there, named in its errors): it carries messages; what the agent knows of the host is
    its ``RemoteHost``'s (``hosts.py``)."""

    def __init__(
        self,
        context: zmq.Context[Any],
        address: str,
        offset: int,
        num_envs: int,
        curve: Optional[tuple[Any, ...]],
        heartbeat_interval: float,
        heartbeat_timeout: float,
        max_message: int,
    ) -> None:
        self.address = address
        self.offset = offset
        self.num_envs = num_envs
        self.interval = heartbeat_interval
        self.timeout = heartbeat_timeout
        self.secure = curve is not None
        self.stats = frames.WireStats()
        self.seq = Sequencer()
        self.results: dict[Any, Any] = {}  # request number (the router's answer: ('router',)) -> (header, arrays)
        self.batches: deque[Any] = deque()
        self.resets: dict[Any, bool] = {}  # numbers of reset requests whose reply voids the batches before it
        self.handshake: Optional[str] = None  # "ok", or why the last handshake failed
        # Set on a reconnect: this address took these keys before, so a failed handshake is a dropped
        # connection (a proxy in front of a host that is not back yet), retried, not a wrong key.
        self.keys_proven = False
        self.codec = "none"  # what the host compresses with (its welcome says): no other codec is taken
        self.max_decoded = max_message  # the bytes one message's arrays may declare
        self.hello: list[Any] = []  # the hello's frames, sent again while the host knows no session of ours
        self.established = False  # the host welcomed this link's session
        self.outputs: list[Any] = []  # lockstep: observation arrays replies decompress into, in turn (see use_outputs)
        self._output = 0
        self.socket = context.socket(zmq.DEALER)
        s = self.socket
        s.setsockopt(zmq.ROUTING_ID, secrets.token_bytes(12))
        s.setsockopt(zmq.LINGER, 0)
        s.setsockopt(zmq.RECONNECT_IVL, 100)
        s.setsockopt(zmq.RECONNECT_IVL_MAX, 1000)
        s.setsockopt(zmq.MAXMSGSIZE, max_message)
        s.setsockopt(zmq.HEARTBEAT_IVL, int(heartbeat_interval * 1000))
        s.setsockopt(zmq.HEARTBEAT_TIMEOUT, int(heartbeat_timeout * 1000))
        s.setsockopt(zmq.HEARTBEAT_TTL, int(heartbeat_timeout * 1000))
        if curve is not None:
            client_public, client_secret, server_public = curve
            s.setsockopt(zmq.CURVE_PUBLICKEY, client_public)
            s.setsockopt(zmq.CURVE_SECRETKEY, client_secret)
            s.setsockopt(zmq.CURVE_SERVERKEY, server_public)
        self.monitor = s.get_monitor_socket(_EVENTS)
        s.connect(address)
        self.last_heard = self.asked = time.monotonic()
        self.last_ping = 0.0
        self._last_pong_ack = -1

    @property
    def env_indices(self) -> list[Any]:
        return list(range(self.offset, self.offset + self.num_envs))

    def send(self, header: dict[str, Any], arrays: Any = ()) -> int:
        """Send a message of the session, numbered; waits for room one ``heartbeat_interval`` at
        most (``_put``), then leaves it to the resend window."""
        self.asked = time.monotonic()  # silence counts from the later of this and the last word
        header = self.seq.stamp(header)
        if header["cmd"] == RESET:
            self.resets[header["seq"]] = True
        data = frames.pack(header, arrays)
        if header["cmd"] == HELLO:
            self.hello = data
        self.seq.keep(header["seq"], data)
        self._put(data, self.interval)
        return int(header["seq"])

    def _put(self, data: list[Any], seconds: float = 0.0) -> bool:
        """Hand ``data`` to libzmq, waiting up to ``seconds`` for room; False when it was not taken.

        A DEALER blocks on send while it has no connection to give a message to, and it has none
        for good once a handshake failed (libzmq drops the connection and does not retry): the
        host refused our key, or one side runs plain text. So nothing here blocks: while no room
        comes, the monitor is read, and a failed handshake raises the error that names the fix. A
        message not taken stays in the resend window (``Sequencer``); the caller's wait decides
        from the host's silence whether it is lost.
        """
        deadline = time.monotonic() + seconds
        while True:
            try:
                self.socket.send_multipart(data, zmq.NOBLOCK, copy=False)
                return True
            except zmq.Again:
                pass
            self._events()
            if self.handshake not in (None, "ok"):
                raise PortalError(f"cannot use env host {self.address}: {self.handshake}")
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            poller = zmq.Poller()
            poller.register(self.socket, zmq.POLLOUT)
            poller.register(self.monitor, zmq.POLLIN)
            poller.poll(max(1, int(min(left, 0.05) * 1000)))

    def lost(self, detail: str) -> HostLostError:
        return HostLostError(self.address, self.env_indices, detail)

    # -- receiving ----------------------------------------------------------------------------
    def drain(self) -> None:
        """Take every message and monitor event that has arrived, without waiting."""
        self._events()
        socket = self.socket
        while socket.getsockopt(_EVENTS_OPT) & _POLLIN:  # (no exceptions on the hot path)
            self._take(socket.recv_multipart(zmq.NOBLOCK, copy=False))

    def _events(self) -> None:
        """Take every monitor event that has arrived, without waiting."""
        while self.monitor.getsockopt(_EVENTS_OPT) & _POLLIN:
            self._handshake_event(parse_monitor_message(self.monitor.recv_multipart(zmq.NOBLOCK))["event"])

    def _handshake_event(self, event: int) -> None:
        if event == zmq.EVENT_HANDSHAKE_SUCCEEDED:
            self.handshake = "ok"
        elif event == zmq.EVENT_HANDSHAKE_FAILED_AUTH:
            self.handshake = (
                "the host refused this agent's key: add this agent's public key (the .key file beside its "
                "client_key) to the host's clients directory (portal-shm host --clients DIR)"
            )
        elif self.handshake != "ok" and not self.keys_proven:
            self.handshake = (
                "the secure handshake failed: the pinned host_key is not this host's key, or one side runs "
                "--insecure/insecure=True and the other does not (there is no fallback to plain text)"
                if self.secure
                else "the handshake failed: the host expects encryption (started without --insecure); "
                "pass its public key as host_key= and this agent's client_key="
            )

    def use_outputs(self, leaves: list[Any], depth: int) -> None:
        """Lockstep replies decompress their observations into ``depth`` sets of arrays (one array
        per leaf: (shape, dtype)), taken in turn: a returned batch stays valid for ``depth - 1``
        further calls, as a local portal's ring slot does, and no step allocates (fresh memory
        for each decompressed Pong batch cost more in page faults than decompressing it)."""
        count = self.num_envs
        self.outputs = [[np.empty((count,) + tuple(shape), dtype) for shape, dtype in leaves] for _ in range(depth)]
        self._output = 0
        # A portal with copy=False hands these out as they are: one kept past its reuse is reported.
        self.kept = KeptViews("reply array", f"ring_depth - 1 = {depth - 1} further calls of step or reset")
        for i in range(depth):
            self.kept.watch(i, holders(self.outputs[i]))
            self.kept.settle(i)

    def _take(self, data: list[Any]) -> None:
        self.last_heard = time.monotonic()
        into = None
        if self.outputs:
            self.kept.check(self._output)
            into = self.outputs[self._output]
        try:
            codecs_allowed = () if self.codec == "none" else (self.codec,)
            header, arrays = frames.unpack(data, self.stats, into, codecs_allowed, self.max_decoded)
        except frames.FrameError as exc:
            raise ServerProtocolError(f"host {self.address} sent a malformed message: {exc}") from None
        cmd = header["cmd"]
        if cmd == PONG:
            self._pong(header)
            return
        if cmd == UNKNOWN_SESSION:
            if self.established:
                raise self.lost("the host no longer knows this agent's session (was it restarted?)")
            if 1 not in self.results and self.hello:
                # Before the welcome and with no answer to the hello, the host has no session of
                # ours: it never got the hello (a connection cut ate it on the way), or it got and
                # acknowledged it, then lost the session it was starting (killed and restarted on
                # the same address, or it freed it after a long cut), as the chaos soak found. Send
                # the hello again, kept for this (the acknowledgement dropped it from the resend
                # list), or the host's answers to the pings would keep the link alive and waiting
                # forever; a host that has the session ignores a second hello. A refused hello's
                # reason came before this (one connection keeps order) as result 1.
                self._put(self.hello)  # (not taken: the next ping's answer asks again)
            return
        if "seq" not in header:  # the host's router answered (a refusal), outside the session
            if self.established and cmd == ERROR:  # (it dropped the session, or refused a message of it)
                message = header.get("message")
                text = message[:500] if isinstance(message, str) else "no reason given"
                raise PortalError(
                    f"env host {self.address} (envs {self.offset}-{self.offset + self.num_envs - 1}): {text}"
                )
            self.results[("router",)] = (header, arrays)
            return
        self.seq.acknowledged(header.get("ack"))
        if not self.seq.accept(header.get("seq")):
            return
        if cmd == BATCH or ("re" not in header and cmd == ERROR):
            self.batches.append((header, arrays, next(_ARRIVAL)))
        else:
            if self.resets.pop(header.get("re"), False):
                self.batches.clear()  # batches of before a reset came before its reply: void
            self.results[header.get("re")] = (header, arrays)
            if into is not None and arrays and arrays[0] is into[0]:
                self._output = (self._output + 1) % len(self.outputs)

    def _pong(self, header: dict[str, Any]) -> None:
        ack = header.get("ack")
        self.seq.acknowledged(ack)
        if self.seq.behind and ack == self._last_pong_ack:  # no progress between two pongs: resend
            for data in self.seq.unacknowledged():
                if not self._put(data):
                    break  # no room: the next pong without progress resends
        self._last_pong_ack = ack if isinstance(ack, int) else -1

    def tick(self, now: float, waiting: bool) -> None:
        """Heartbeat while the agent waits on this host; raise when it has been silent too long."""
        if not waiting:
            return
        silent = now - max(self.last_heard, self.asked)
        if silent > self.timeout:
            detail = f"no word from it for {silent:.1f} s (heartbeat_timeout={self.timeout:g})"
            if self.handshake not in (None, "ok"):
                detail = self.handshake
            elif self.handshake is None:
                detail += "; no connection was ever set up: is `portal-shm host` running there, and the port open?"
            raise self.lost(detail)
        if now - self.last_ping >= self.interval:
            self.last_ping = now
            self._put(frames.pack({"cmd": PING, "ack": self.seq.received, "sent": self.seq.sent}))

    def close(self) -> None:
        if self.socket.closed:  # (a link whose reopening failed is closed again with the rest)
            return
        self.socket.disable_monitor()
        self.monitor.close(0)
        self.socket.close(0)


def poller_of(links: list[HostLink]) -> zmq.Poller:
    poller = zmq.Poller()
    for link in links:
        poller.register(link.socket, zmq.POLLIN)
        poller.register(link.monitor, zmq.POLLIN)
    return poller


def wait(
    links: list[Any], ready: Any, deadline: Optional[float], what: str, poller: Optional[zmq.Poller] = None
) -> None:
    """Poll ``links`` until ``ready()``; heartbeats and loss checks on the links ``ready`` waits on."""
    poller = poller or poller_of(links)
    while True:
        for link in links:
            link.drain()
        waiting = ready()
        if not waiting:
            return
        now = time.monotonic()
        for link in waiting:
            if link.handshake not in (None, "ok"):
                raise PortalError(f"cannot use env host {link.address}: {link.handshake}")
            link.tick(now, True)
        if deadline is not None and now > deadline:
            raise PortalTimeoutError(f"{what}: hosts {[link.address for link in waiting]} did not answer in time")
        timeout = min(link.interval for link in waiting)
        if deadline is not None:
            timeout = min(timeout, max(0.0, deadline - now))
        poller.poll(max(1, int(timeout * 1000)))
