"""The agent's end of one env server's control channel (ZeroMQ over ipc://, msgpack).

Every wait here is sliced so that a dead server is noticed within ``POLL_SLICE`` seconds and an
unresponsive one within the caller's timeout: the agent never hangs on a server.
"""

from __future__ import annotations

import os
import time
from typing import Any, Callable, Optional

import zmq

from ...errors import PortalTimeoutError, ServerProtocolError
from ...wire import protocol as P

POLL_SLICE = 0.05


class ControlChannel:
    def __init__(self, context: zmq.SyncContext, address: str, describe: Optional[Callable[[], str]] = None) -> None:
        self.address = address
        self.describe = describe or (lambda: address)
        self.socket = context.socket(zmq.DEALER)
        self.socket.setsockopt(zmq.LINGER, 0)
        self.socket.setsockopt(zmq.MAXMSGSIZE, P.MAX_MESSAGE_BYTES)
        self.socket.bind(address)
        if address.startswith("ipc://"):
            os.chmod(address[len("ipc://") :], 0o600)

    def send(self, message: dict[str, Any], check: Callable[[], None], timeout: Optional[float] = 30.0) -> None:
        """Send without ever blocking on a dead peer (ZeroMQ would wait for it forever)."""
        data = P.packb(message)
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            try:
                self.socket.send(data, zmq.NOBLOCK, copy=False)
                return
            except zmq.Again:
                check()
                if deadline is not None and time.monotonic() > deadline:
                    raise PortalTimeoutError(
                        f"could not send {message.get('cmd')!r} to {self.describe()} within {timeout} s"
                    ) from None
                time.sleep(0.001)

    def recv(self, check: Callable[[], None], timeout: Optional[float], what: str) -> dict[str, Any]:
        """Receive one message; ``check`` raises if the server died, timeout raises after ``timeout`` s."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self.socket.poll(int(POLL_SLICE * 1000)):
            check()
            if deadline is not None and time.monotonic() > deadline:
                raise PortalTimeoutError(f"no answer to {what} within {timeout:.3g} s")
        data = self.socket.recv()
        try:
            message = P.unpackb(data)
        except P.ProtocolError as exc:
            raise ServerProtocolError(f"corrupt message during {what}: {exc}") from None
        if not isinstance(message, dict) or not isinstance(message.get("cmd"), str):
            raise ServerProtocolError(f"malformed message during {what}: {str(message)[:200]}")
        return message

    def close(self, linger_ms: int = 0) -> None:
        """``linger_ms``: how long ZeroMQ may still deliver what was sent last (a CLOSE to a server)."""
        self.socket.close(linger=linger_ms)
