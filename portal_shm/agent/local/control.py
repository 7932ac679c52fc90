"""The agent's end of one env server's control channel (ZeroMQ over ipc://, msgpack).

Every wait here is sliced so that a dead server is noticed within ``POLL_SLICE`` seconds and an
unresponsive one within the caller's timeout: the agent never hangs on a server. A connection
that dropped is noticed too: ZeroMQ drops a message over the socket's cap together with the
connection and says so only to a socket monitor, which the slow path of every wait reads.
"""

from __future__ import annotations

import os
import time
from typing import Any, Callable, Optional

import zmq

from ...errors import ConnectionDroppedError, PortalTimeoutError, ServerProtocolError
from ...wire import protocol

POLL_SLICE = 0.05
# A dropped connection is reported this long after it was seen, unless the server's exit (which
# drops it too) is found meanwhile: the error then names the exit.
DROP_GRACE = 1.0


class ControlChannel:
    def __init__(self, context: zmq.SyncContext, address: str, describe: Optional[Callable[[], str]] = None) -> None:
        self.address = address
        self.describe = describe or (lambda: address)
        self.socket = context.socket(zmq.DEALER)
        self.socket.setsockopt(zmq.LINGER, 0)
        self.max_message = protocol.MAX_MESSAGE_BYTES  # the cap each server is told (its config) and checks
        self.socket.setsockopt(zmq.MAXMSGSIZE, self.max_message)
        self.monitor = self.socket.get_monitor_socket(zmq.EVENT_DISCONNECTED)
        self.dropped_at: Optional[float] = None
        self.socket.bind(address)
        if address.startswith("ipc://"):
            os.chmod(address[len("ipc://") :], 0o600)

    def send(self, message: dict[str, Any], check: Callable[[], None], timeout: Optional[float] = 30.0) -> None:
        """Send without ever blocking on a dead peer (ZeroMQ would wait for it forever)."""
        data = protocol.packb(message)
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            try:
                self.socket.send(data, zmq.NOBLOCK, copy=False)
                return
            except zmq.Again:
                check()
                self.check_connection()
                if deadline is not None and time.monotonic() > deadline:
                    raise PortalTimeoutError(
                        f"could not send {message.get('cmd')!r} to {self.describe()} within {timeout} s"
                    ) from None
                time.sleep(0.001)

    def ready(self) -> bool:
        """Whether a message is waiting (never blocks)."""
        return bool(self.socket.poll(0))

    def recv(self, check: Callable[[], None], timeout: Optional[float], what: str) -> dict[str, Any]:
        """Receive one message; ``check`` raises if the server died, timeout raises after ``timeout`` s."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self.socket.poll(int(POLL_SLICE * 1000)):
            check()
            self.check_connection()
            if deadline is not None and time.monotonic() > deadline:
                if self.dropped_at is not None:  # it did answer: the agent's socket dropped it
                    raise self._dropped()
                raise PortalTimeoutError(f"no answer to {what} within {timeout:.3g} s")
        data = self.socket.recv()
        try:
            message = protocol.unpackb(data)
        except protocol.ProtocolError as exc:
            raise ServerProtocolError(f"corrupt message during {what}: {exc}") from None
        if not isinstance(message, dict) or not isinstance(message.get("cmd"), str):
            raise ServerProtocolError(f"malformed message during {what}: {str(message)[:200]}")
        return message

    def check_connection(self) -> None:
        """Raise ``ConnectionDroppedError`` ``DROP_GRACE`` s after the server's connection dropped
        (the monitor's events are all drops). For the slow path of waits: it polls a socket."""
        if self.dropped_at is None:
            if not self.monitor.poll(0):
                return
            while self.monitor.poll(0):
                self.monitor.recv_multipart()
            self.dropped_at = time.monotonic()
        if time.monotonic() - self.dropped_at >= DROP_GRACE:
            raise self._dropped()

    def _dropped(self) -> ConnectionDroppedError:
        return ConnectionDroppedError(
            f"{self.describe()}: its control connection dropped while the server still runs. The "
            f"agent's socket drops a message over its {self.max_message:,}-byte cap (MAX_MESSAGE_BYTES) "
            "together with the connection, so the server sent such a message (or its env broke the "
            "connection) and what it sent is lost. Servers of this portal-shm version check the cap "
            "before they send: an env that writes to its server's socket, or a server of another "
            "version (install the agent's portal-shm in the env runtime), does this"
        )

    def close(self, linger_ms: int = 0) -> None:
        """``linger_ms``: how long ZeroMQ may still deliver what was sent last (a CLOSE to a server)."""
        if not self.socket.closed:
            self.socket.disable_monitor()
        self.monitor.close(linger=0)
        self.socket.close(linger=linger_ms)
