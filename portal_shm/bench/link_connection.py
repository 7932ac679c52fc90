"""One connection through the emulated link (``link.py``): both directions forwarded, each chunk
stamped with when it is due at the other end as it is read, and released in order when due.

What every connection of one link shares (its delay and rate, when each direction of the link is
free again, a stall, the bytes delivered) is the link's ``Shaping``, handed to each connection:
the link's module docstring says how the stamps make a latency and a bandwidth cap.
"""

from __future__ import annotations

import asyncio
import collections
import socket
import struct
from dataclasses import dataclass, field
from typing import Deque, Dict, List, Optional, Tuple

_SLICE = 16 * 1024
"""With a rate cap, chunks are cut to this size so bytes trickle out as on a real link, instead of
a whole 64 KiB chunk landing at once when its last byte is due."""

_EOF = b""


@dataclass
class Shaping:
    """The link's traffic rules and the state its connections share. ``delay`` and ``rate`` may
    change while the link runs: new chunks use the new values."""

    delay: float  # seconds one way
    rate: Optional[float]  # bytes per second per direction, None: unlimited
    chunk_size: int  # bytes read from a socket at a time
    max_queued: int  # bytes one direction of one connection may hold before its source is not read
    stall_until: float = 0.0  # loop.time() before which nothing is forwarded
    free_at: Dict[str, float] = field(default_factory=lambda: {"up": 0.0, "down": 0.0})  # each direction idle
    delivered: Dict[str, int] = field(default_factory=lambda: {"up": 0, "down": 0})  # bytes, all connections


class Lane:
    """One direction of one connection: chunks stamped with when they are due, released in order."""

    def __init__(self) -> None:
        self.chunks: Deque[Tuple[float, bytes]] = collections.deque()
        self.queued = 0  # bytes read from the source and not yet written to the destination
        self.ready = asyncio.Event()  # set when chunks is not empty
        self.room = asyncio.Event()  # set when queued dropped, so the reader may read again

    def push(self, due: float, data: bytes) -> None:
        self.chunks.append((due, data))
        self.queued += len(data)
        self.ready.set()


class Connection:
    """A client's connection and the proxy's connection to the target, torn down together."""

    def __init__(self, client: asyncio.StreamWriter, target: asyncio.StreamWriter, shaping: Shaping) -> None:
        self.client = client
        self.target = target
        self.up = Lane()
        self.down = Lane()
        self.task: Optional[asyncio.Task] = None
        self._shaping = shaping

    def reset(self) -> None:
        """Close both sockets at once with a TCP reset, dropping what is queued: what a cut looks like."""
        reset(self.client)
        reset(self.target)
        if self.task is not None and self.task is not asyncio.current_task():
            self.task.cancel()

    async def forward(self, client_reader: asyncio.StreamReader, target_reader: asyncio.StreamReader) -> None:
        """Run both directions; an error on either side resets both, EOF on both closes both."""
        tasks: List[asyncio.Task] = [
            asyncio.ensure_future(self._read(client_reader, self.up, "up")),
            asyncio.ensure_future(self._write(self.up, self.target, "up")),
            asyncio.ensure_future(self._read(target_reader, self.down, "down")),
            asyncio.ensure_future(self._write(self.down, self.client, "down")),
        ]
        try:
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
            failed = any(not t.cancelled() and t.exception() is not None for t in done)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        if failed:
            self.reset()
        else:
            self.client.close()
            self.target.close()

    async def _read(self, reader: asyncio.StreamReader, lane: Lane, direction: str) -> None:
        """Read the source, stamp each chunk with when it is due at the other end, queue it."""
        loop = asyncio.get_running_loop()
        shaping = self._shaping
        while True:
            while lane.queued >= shaping.max_queued:
                lane.room.clear()
                await lane.room.wait()
            data = await reader.read(shaping.chunk_size)
            now = loop.time()
            if not data:
                lane.push(max(now, shaping.free_at[direction]) + shaping.delay, _EOF)
                return
            rate = shaping.rate
            if rate is None:
                lane.push(now + shaping.delay, data)
                continue
            view = memoryview(data)
            for start in range(0, len(data), _SLICE):
                piece = bytes(view[start : start + _SLICE])
                # The piece occupies the link after the bytes before it, then travels `delay`.
                finish = max(now, shaping.free_at[direction]) + len(piece) / rate
                shaping.free_at[direction] = finish
                lane.push(finish + shaping.delay, piece)

    async def _write(self, lane: Lane, writer: asyncio.StreamWriter, direction: str) -> None:
        """Deliver the lane's chunks in order, each when it is due and no stall holds it."""
        loop = asyncio.get_running_loop()
        shaping = self._shaping
        while True:
            while not lane.chunks:
                lane.ready.clear()
                await lane.ready.wait()
            due, data = lane.chunks[0]
            while True:  # re-check after each sleep: a stall may have begun or been extended
                wait = max(due, shaping.stall_until) - loop.time()
                if wait <= 0:
                    break
                await asyncio.sleep(wait)
            lane.chunks.popleft()
            if not data:
                if writer.can_write_eof():
                    writer.write_eof()  # forward a half-close, e.g. a client that shut down writing
                return
            writer.write(data)
            shaping.delivered[direction] += len(data)
            await writer.drain()
            lane.queued -= len(data)
            lane.room.set()


def reset(writer: asyncio.StreamWriter) -> None:
    """Abort a connection with RST (SO_LINGER 0) so the peer sees ECONNRESET, not a polite EOF."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass
    writer.transport.abort()
