"""An emulated network link: a TCP proxy on loopback that adds latency and a bandwidth cap.

This machine has no ``tc netem``, so tests and benchmarks that need a slow or flaky network put
this proxy between a client and a server instead::

    with Link("127.0.0.1:5555", delay=0.015, rate=12.5e6) as link:   # 15 ms each way, 100 Mbit/s
        connect(link.address)                                        # "tcp://127.0.0.1:PORT"

How it shapes traffic: every chunk read from one side is stamped with the time it is due at the
other side, ``now + delay``; with a bandwidth cap the chunk first has to be serialized onto the
link, so it is stamped with ``finish + delay``, where ``finish`` is when the previous bytes in that
direction finish at ``rate`` plus ``len(chunk) / rate``. A writer task per direction releases the
chunks in order when due. Stamping at read time (rather than sleeping in the reader) keeps the link
full: a transfer pays the latency once, not once per chunk, as on a real link. Measured here:
15 ms each way gives a 31.6 ms round trip.

What it does not emulate: the TCP handshake (a connect completes at once, the proxy then opens its
own connection to the target), loss, reordering or jitter. Faults for tests of reconnects are
explicit: :meth:`Link.cut` drops every connection and refuses new ones for a while, :meth:`Link.stall`
holds all traffic for a while and then releases it, losing nothing.

The event loop runs in a daemon thread, so synchronous code (tests, benchmarks) drives a link with
plain method calls. Python standard library only.

By hand: ``python -m portal_shm.bench.link --target 127.0.0.1:5555 --delay-ms 15 --rate-mbit 100``.
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import sys
import threading
import time
from typing import Any, Coroutine, List, Optional, Set, Tuple

from .link_connection import Connection, Shaping, reset

__all__ = ["Link", "main", "parse_address"]

CHUNK_SIZE = 64 * 1024
"""Bytes read from a socket at a time."""

MAX_QUEUED = 4 * 1024 * 1024
"""Bytes one direction of one connection may hold before the proxy stops reading its source."""


def parse_address(address: str) -> Tuple[str, int]:
    """``(host, port)`` from ``"host:port"``, ``"tcp://host:port"`` or ``"[::1]:port"``."""
    text = address.strip()
    if text.startswith("tcp://"):
        text = text[len("tcp://") :]
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ValueError(f"expected host:port or tcp://host:port, got {address!r}")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host, int(port)


def _format_address(host: str, port: int) -> str:
    return f"tcp://[{host}]:{port}" if ":" in host else f"tcp://{host}:{port}"


class Link:
    """A TCP proxy on loopback that delays and rate-limits both directions, with fault injection.

    ``target``: where connections go, ``"host:port"`` or ``"tcp://host:port"``. ``delay``: seconds
    one way (a round trip takes about ``2 * delay``). ``rate``: bytes per second per direction,
    shared by all connections as on one physical link (``None``: unlimited). ``listen``: where to
    listen, port 0 for a free one (see :attr:`address`). ``delay`` and ``rate`` may be changed while
    the link runs; new chunks use the new values.

    ``max_queued`` bounds the bytes held per direction of a connection: beyond it the proxy stops
    reading that side, so TCP back-pressure reaches the sender and a large transfer through a slow
    link does not grow memory without bound.
    """

    def __init__(
        self,
        target: str,
        delay: float = 0.0,
        rate: Optional[float] = None,
        listen: str = "127.0.0.1:0",
        *,
        chunk_size: int = CHUNK_SIZE,
        max_queued: int = MAX_QUEUED,
    ) -> None:
        if delay < 0:
            raise ValueError(f"delay must be >= 0, got {delay}")
        if rate is not None and rate <= 0:
            raise ValueError(f"rate must be > 0 bytes/s or None, got {rate}")
        self.target = parse_address(target)
        self.listen = parse_address(listen)
        rate = None if rate is None else float(rate)
        self._shaping = Shaping(float(delay), rate, int(chunk_size), int(max_queued))  # what its connections share
        self.connections = 0
        """Connections accepted and forwarded to the target."""
        self.refused = 0
        """Connections closed at once: during a cut, or when the target could not be reached."""
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._thread: Optional[threading.Thread] = None
        self._server: Optional[asyncio.AbstractServer] = None
        self._bound: Optional[Tuple[str, int]] = None
        self._conns: Set[Connection] = set()
        self._cut_until = 0.0  # loop.time() before which new connections are refused
        self._lock = threading.Lock()
        self._closed = False

    # -- lifecycle, called from the user's thread ------------------------------------------------

    def start(self) -> Link:
        """Listen and start forwarding in a background thread; returns self. Raises OSError when
        the listening address cannot be bound."""
        with self._lock:
            if self._closed:
                raise RuntimeError("link is closed")
            if self._thread is not None:
                return self
            loop = asyncio.new_event_loop()
            thread = threading.Thread(target=self._run, args=(loop,), name="portal-shm-link", daemon=True)
            self._loop, self._thread = loop, thread
            thread.start()
            try:
                asyncio.run_coroutine_threadsafe(self._open(), loop).result()
            except BaseException:
                self._stop_thread()
                self._closed = True
                raise
            thread.name = f"portal-shm-link:{self.port}"
        return self

    def close(self) -> None:
        """Stop listening, reset every connection and join the thread. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            if self._thread is None:
                return
            try:
                asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop).result(timeout=10)
            finally:
                self._stop_thread()

    def __enter__(self) -> Link:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        where = self.address if self._bound else "not started"
        rate = "unlimited" if self.rate is None else f"{self.rate * 8 / 1e6:g} Mbit/s"
        target = _format_address(*self.target)
        return f"Link({where} -> {target}, delay={self.delay * 1e3:g} ms each way, rate={rate})"

    @property
    def delay(self) -> float:
        """Seconds one way; may be changed while the link runs (new chunks use it)."""
        return self._shaping.delay

    @delay.setter
    def delay(self, seconds: float) -> None:
        self._shaping.delay = seconds

    @property
    def rate(self) -> Optional[float]:
        """Bytes per second per direction (None: unlimited); may be changed while the link runs."""
        return self._shaping.rate

    @rate.setter
    def rate(self, bytes_per_second: Optional[float]) -> None:
        self._shaping.rate = bytes_per_second

    @property
    def chunk_size(self) -> int:
        """Bytes read from a socket at a time."""
        return self._shaping.chunk_size

    @property
    def max_queued(self) -> int:
        """Bytes one direction of one connection may hold before the proxy stops reading its source."""
        return self._shaping.max_queued

    @property
    def bytes_up(self) -> int:
        """Bytes delivered client -> target."""
        return self._shaping.delivered["up"]

    @property
    def bytes_down(self) -> int:
        """Bytes delivered target -> client."""
        return self._shaping.delivered["down"]

    @property
    def address(self) -> str:
        """``"tcp://127.0.0.1:PORT"``: where clients connect."""
        if self._bound is None:
            raise RuntimeError("link is not started")
        return _format_address(*self._bound)

    @property
    def port(self) -> int:
        """The listening port (useful with ``listen="127.0.0.1:0"``)."""
        if self._bound is None:
            raise RuntimeError("link is not started")
        return self._bound[1]

    @property
    def open_connections(self) -> int:
        """Connections forwarding right now."""
        return len(self._conns)

    @property
    def queued_bytes(self) -> int:
        """Bytes read and not yet delivered, all connections and directions together."""
        return sum(c.up.queued + c.down.queued for c in list(self._conns))

    # -- fault injection -------------------------------------------------------------------------

    def cut(self, seconds: float) -> None:
        """Pull the cable: reset every open connection now (both ends see ECONNRESET or EOF, what
        was in flight is lost), and for ``seconds`` reset every new connection as soon as it is
        accepted. Then connections work again. Returns once the open connections are gone."""
        self._call(self._cut(float(seconds)))

    def stall(self, seconds: float) -> None:
        """A blip: keep connections open but deliver nothing for ``seconds``; what arrives meanwhile
        is held (up to ``max_queued`` per direction, then TCP back-pressure) and released in order
        afterwards, at once for what was already due (held bytes do not pay the rate cap twice).
        Nothing is lost. Calls extend, never shorten, a stall in progress."""
        self._call(self._stall(float(seconds)))

    def _call(self, coro: Coroutine[Any, Any, None]) -> None:
        if self._loop is None or self._closed:
            coro.close()
            raise RuntimeError("link is not running")
        asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout=10)

    # -- the loop thread -------------------------------------------------------------------------

    def _run(self, loop: asyncio.AbstractEventLoop) -> None:
        asyncio.set_event_loop(loop)
        try:
            loop.run_forever()
        finally:
            loop.close()

    def _stop_thread(self) -> None:
        loop, thread = self._loop, self._thread
        if loop is not None and thread is not None and thread.is_alive():
            loop.call_soon_threadsafe(loop.stop)
            thread.join()

    async def _open(self) -> None:
        host, port = self.listen
        self._server = await asyncio.start_server(self._accept, host, port, limit=2 * self.chunk_size)
        sockname = self._server.sockets[0].getsockname()
        self._bound = (sockname[0], sockname[1])

    async def _shutdown(self) -> None:
        server = self._server
        if server is not None:
            server.close()
        for conn in list(self._conns):
            conn.reset()
        # Every handler: forwarding ones (just cancelled) and those still connecting to the target.
        handlers = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in handlers:
            task.cancel()
        if handlers:
            await asyncio.gather(*handlers, return_exceptions=True)
        if server is not None:
            await server.wait_closed()

    async def _cut(self, seconds: float) -> None:
        loop = asyncio.get_running_loop()
        self._cut_until = max(self._cut_until, loop.time() + seconds)
        tasks = [c.task for c in self._conns if c.task is not None]
        for conn in list(self._conns):
            conn.reset()
        # Bytes stamped onto the link died with their connections: the link is idle again.
        self._shaping.free_at = {"up": 0.0, "down": 0.0}
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _stall(self, seconds: float) -> None:
        loop = asyncio.get_running_loop()
        self._shaping.stall_until = max(self._shaping.stall_until, loop.time() + seconds)

    async def _accept(self, client_reader: asyncio.StreamReader, client: asyncio.StreamWriter) -> None:
        loop = asyncio.get_running_loop()
        if loop.time() < self._cut_until:
            self.refused += 1
            reset(client)
            return
        try:
            target_reader, target = await asyncio.open_connection(*self.target, limit=2 * self.chunk_size)
        except (OSError, asyncio.CancelledError):
            self.refused += 1
            reset(client)
            return
        if loop.time() < self._cut_until:  # a cut came while connecting
            self.refused += 1
            reset(client)
            reset(target)
            return
        for writer in (client, target):
            sock = writer.get_extra_info("socket")
            if sock is not None:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn = Connection(client, target, self._shaping)
        conn.task = asyncio.current_task()
        self._conns.add(conn)
        self.connections += 1
        try:
            await conn.forward(client_reader, target_reader)
        except asyncio.CancelledError:
            pass  # cut or close: the sockets are already reset
        finally:
            self._conns.discard(conn)


def main(argv: Optional[List[str]] = None) -> int:
    """``python -m portal_shm.bench.link``: emulate a link by hand until Ctrl-C."""
    parser = argparse.ArgumentParser(
        prog="python -m portal_shm.bench.link",
        description="A TCP proxy that adds latency and a bandwidth cap (for machines without tc netem).",
    )
    parser.add_argument("--target", required=True, help="where to forward: host:port or tcp://host:port")
    parser.add_argument("--listen", default="127.0.0.1:0", help="where to listen (default 127.0.0.1:0, a free port)")
    parser.add_argument("--delay-ms", type=float, default=0.0, help="one-way delay in ms (round trip: twice this)")
    parser.add_argument("--rate-mbit", type=float, default=None, help="bandwidth per direction in Mbit/s")
    args = parser.parse_args(argv)
    rate = None if args.rate_mbit is None else args.rate_mbit * 1e6 / 8
    try:
        link = Link(args.target, delay=args.delay_ms / 1e3, rate=rate, listen=args.listen)
    except ValueError as exc:
        parser.error(str(exc))
    try:
        link.start()
    except OSError as exc:
        print(f"cannot listen on {args.listen}: {exc}", file=sys.stderr)
        return 1
    print(link.address, flush=True)
    print(f"{link!r}; Ctrl-C to stop", file=sys.stderr, flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        link.close()
    print(
        f"{link.connections} connections, {link.bytes_up} bytes up, {link.bytes_down} bytes down",
        file=sys.stderr,
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
