"""The frames an agent and a zygote exchange over their Unix socket (``server/zygote.py``).

Length-prefixed msgpack maps: the agent sends ``fork`` (a server's config file and log path) and
``signal`` (for a forked server the zygote has not reaped yet); the zygote sends ``ready`` once
(whether it can fork, and why not), ``forked`` (the pid of a request) and ``exited`` (a forked
server's exit status). Both sides check sizes and types: a frame is untrusted input.
"""

from __future__ import annotations

import socket
import struct
from typing import Any

from .protocol import ProtocolError, packb, unpackb

_HEADER = struct.Struct(">I")
MAX_FRAME = 16 << 20
READY, FORK, FORKED, SIGNAL, EXITED = "ready", "fork", "forked", "signal", "exited"


def send_frame(sock: socket.socket, message: dict[str, Any]) -> None:
    data = packb(message)
    sock.sendall(_HEADER.pack(len(data)) + data)


def take_frames(buffer: bytearray) -> list[dict[str, Any]]:
    """The whole frames at the front of ``buffer`` (removed from it), decoded."""
    out: list[dict[str, Any]] = []
    while len(buffer) >= _HEADER.size:
        (size,) = _HEADER.unpack_from(buffer)
        if size > MAX_FRAME:
            raise ProtocolError(f"a zygote frame of {size} bytes is over the {MAX_FRAME} limit")
        if len(buffer) < _HEADER.size + size:
            break
        message = unpackb(bytes(buffer[_HEADER.size : _HEADER.size + size]))
        del buffer[: _HEADER.size + size]
        if not isinstance(message, dict):
            raise ProtocolError("a zygote frame is not a map")
        out.append(message)
    return out
