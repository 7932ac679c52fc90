"""The emulated link (``portal_shm.bench.link``): real sockets on 127.0.0.1, an echo server as target.

Times are checked from below only: noise on a shared machine can only make things slower.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest

from portal_shm.bench.link import Link, main, parse_address

HOST = "127.0.0.1"


class EchoServer:
    """Echoes every connection until EOF, then half-closes; one thread per connection."""

    def __init__(self) -> None:
        self.sock = socket.create_server((HOST, 0))
        self.port = self.sock.getsockname()[1]
        self.accepted = 0
        self._thread = threading.Thread(target=self._serve, name="echo-server", daemon=True)
        self._thread.start()

    @property
    def address(self) -> str:
        return f"{HOST}:{self.port}"

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted += 1
            threading.Thread(target=self._echo, args=(conn,), name="echo-conn", daemon=True).start()

    @staticmethod
    def _echo(conn: socket.socket) -> None:
        with conn:
            try:
                while True:
                    data = conn.recv(1 << 16)
                    if not data:
                        conn.shutdown(socket.SHUT_WR)
                        return
                    conn.sendall(data)
            except OSError:
                return

    def close(self) -> None:
        try:
            self.sock.shutdown(socket.SHUT_RDWR)  # wakes the blocked accept(); close() alone does not
        except OSError:
            pass
        self.sock.close()
        self._thread.join(timeout=5)


@pytest.fixture
def echo():
    server = EchoServer()
    yield server
    server.close()


def connect(link: Link, timeout: float = 5.0) -> socket.socket:
    sock = socket.create_connection((HOST, link.port), timeout=timeout)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def recv_exactly(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        data = sock.recv(min(1 << 20, n - len(buf)))
        if not data:
            raise EOFError(f"EOF after {len(buf)} of {n} bytes")
        buf += data
    return bytes(buf)


def recv_until_eof(sock: socket.socket) -> bytes:
    buf = bytearray()
    while True:
        data = sock.recv(1 << 20)
        if not data:
            return bytes(buf)
        buf += data


def send_in_thread(sock: socket.socket, data: bytes, shutdown: bool = True) -> threading.Thread:
    def send() -> None:
        sock.sendall(data)
        if shutdown:
            sock.shutdown(socket.SHUT_WR)

    thread = threading.Thread(target=send, daemon=True)
    thread.start()
    return thread


def is_dead(sock: socket.socket) -> bool:
    """True when the peer reset or closed the connection."""
    try:
        sock.sendall(b"?")
        return sock.recv(1) == b""
    except ConnectionError:
        return True


def test_parse_address():
    assert parse_address("127.0.0.1:5555") == ("127.0.0.1", 5555)
    assert parse_address("tcp://127.0.0.1:5555") == ("127.0.0.1", 5555)
    assert parse_address("tcp://[::1]:7") == ("::1", 7)
    for bad in ("127.0.0.1", "tcp://:5", "host:port", ""):
        with pytest.raises(ValueError):
            parse_address(bad)
    with pytest.raises(ValueError):
        Link("127.0.0.1:1", delay=-1)
    with pytest.raises(ValueError):
        Link("127.0.0.1:1", rate=0)


def test_bytes_intact_both_ways(echo):
    data = os.urandom(4_000_000)
    with Link(echo.address) as link:
        assert link.address == f"tcp://{HOST}:{link.port}"
        with connect(link) as sock:
            sender = send_in_thread(sock, data)
            got = recv_until_eof(sock)  # the echo's EOF arrives only after the client's, forwarded
            sender.join()
        assert got == data
        assert link.bytes_up == len(data) and link.bytes_down == len(data)
        assert link.connections == 1


def test_concurrent_connections_with_delay(echo):
    payloads = [os.urandom(300_000 + i) for i in range(4)]
    results = [b""] * len(payloads)

    def roundtrip(i: int) -> None:
        with connect(link) as sock:
            send_in_thread(sock, payloads[i])
            results[i] = recv_until_eof(sock)

    with Link(echo.address, delay=0.005) as link:
        threads = [threading.Thread(target=roundtrip, args=(i,)) for i in range(len(payloads))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=10)
        assert results == payloads
        assert link.connections == len(payloads)


def test_round_trip_pays_the_delay_twice(echo):
    with Link(echo.address, delay=0.015) as link, connect(link) as sock:
        for i in range(3):
            start = time.monotonic()
            sock.sendall(bytes([i]))
            assert recv_exactly(sock, 1) == bytes([i])
            assert time.monotonic() - start >= 0.030


def test_rate_cap_serializes_bytes(echo):
    data = os.urandom(400_000)
    with Link(echo.address, rate=1e6) as link, connect(link) as sock:
        start = time.monotonic()
        send_in_thread(sock, data)
        got = recv_until_eof(sock)
        elapsed = time.monotonic() - start
    assert got == data
    # 400 kB at 1 MB/s is 0.4 s on the way up alone (the way down overlaps it).
    assert elapsed >= 0.39


def test_cut_resets_open_connections_and_refuses_new_ones(echo):
    with Link(echo.address) as link:
        sock = connect(link, timeout=2)
        sock.sendall(b"hello")
        assert recv_exactly(sock, 5) == b"hello"
        start = time.monotonic()
        link.cut(0.4)
        assert link.open_connections == 0
        with sock:
            try:
                assert sock.recv(1) == b""
            except ConnectionError:
                pass
        # During the cut: either the connect fails or the connection is dropped at once.
        if time.monotonic() - start < 0.3:
            try:
                with connect(link, timeout=2) as late:
                    assert is_dead(late)
            except ConnectionError:
                pass
            assert link.refused >= 1
        time.sleep(max(0.0, 0.45 - (time.monotonic() - start)))
        with connect(link) as again:
            again.sendall(b"back")
            assert recv_exactly(again, 4) == b"back"
        assert link.connections == 2


def test_stall_delays_but_loses_nothing(echo):
    messages = [os.urandom(1000) for _ in range(10)]
    with Link(echo.address, delay=0.001) as link, connect(link) as sock:
        sock.sendall(b"warm")
        assert recv_exactly(sock, 4) == b"warm"
        start = time.monotonic()
        link.stall(0.3)
        for m in messages:
            sock.sendall(m)
        got = recv_exactly(sock, sum(map(len, messages)))
        assert time.monotonic() - start >= 0.29
        assert got == b"".join(messages)
        assert link.open_connections == 1
        # After the stall, traffic flows normally again.
        sock.sendall(b"after")
        assert recv_exactly(sock, 5) == b"after"


def test_back_pressure_bounds_what_is_held():
    """A target that never reads: the link stops reading the client instead of buffering it all."""
    sink = socket.create_server((HOST, 0))
    held = []
    accepter = threading.Thread(target=lambda: held.append(sink.accept()[0]), daemon=True)
    accepter.start()
    max_queued = 256 * 1024
    with Link(f"{HOST}:{sink.getsockname()[1]}", max_queued=max_queued) as link:
        with connect(link, timeout=0.3) as sock:
            chunk = b"\0" * (1 << 20)
            sent = 0
            try:
                while sent < 64 << 20:
                    sent += sock.send(chunk)
            except socket.timeout:
                pass
            assert link.queued_bytes <= max_queued + link.chunk_size
    accepter.join(timeout=5)
    for conn in held:
        conn.close()
    sink.close()


def test_close_stops_thread_and_port(echo):
    link = Link(echo.address, delay=0.01).start()
    port = link.port
    sock = connect(link)
    sock.sendall(b"x")
    assert recv_exactly(sock, 1) == b"x"
    link.close()
    link.close()  # idempotent
    assert not [t for t in threading.enumerate() if t.name.startswith("portal-shm-link")]
    with sock:
        try:
            assert sock.recv(1) == b""
        except ConnectionError:
            pass
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection((HOST, port), timeout=2).close()
    with pytest.raises(RuntimeError):
        link.stall(0.1)


def test_unreachable_target_closes_the_client():
    unused = socket.create_server((HOST, 0))
    port = unused.getsockname()[1]
    unused.close()
    with Link(f"{HOST}:{port}") as link:
        try:
            with connect(link, timeout=2) as sock:
                assert is_dead(sock)
        except ConnectionError:
            pass  # the reset can beat the end of connect()
        assert link.refused == 1 and link.connections == 0


def test_main_rejects_a_bad_target(capsys):
    with pytest.raises(SystemExit):
        main(["--target", "nowhere"])


def test_command_line_forwards_until_interrupted(echo):
    proc = subprocess.Popen(
        [sys.executable, "-m", "portal_shm.bench.link", "--target", echo.address, "--delay-ms", "1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # SIGINT as a terminal leaves it: a CI runner or nohup leave it ignored, and Ctrl-C never arrives
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        line = proc.stdout.readline().strip()
        assert line.startswith(f"tcp://{HOST}:")
        with socket.create_connection(parse_address(line), timeout=5) as sock:
            sock.sendall(b"cli")
            assert recv_exactly(sock, 3) == b"cli"
        proc.send_signal(signal.SIGINT)  # as Ctrl-C
        assert proc.wait(timeout=10) == 0
        assert "1 connections" in proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()
        proc.stderr.close()
