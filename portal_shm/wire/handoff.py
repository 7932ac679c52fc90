"""Handing the ring and a server's doorbell ends to it over a unix socket (SCM_RIGHTS).

The ring is a memfd with no name (see ``ring``) and the doorbells are pipes (see ``doorbell``), so
a server cannot open them by a path: the agent listens on a socket file in its run directory
(0600, in a 0700 directory, which containers bind-mount). A server connects when it gets its
ATTACH and presents the random token of its launch config; the agent answers with the ring's
descriptor and that server's own pipe ends, then closes its copies of those ends. A token works
once, so a server gets exactly its own ends and a stale or stray client gets nothing.
"""

from __future__ import annotations

import array
import os
import socket
import threading
import time
from typing import Optional

_TOKEN_BYTES = 64


class SegmentOffer:
    """The agent's listening socket, served by a thread while some server is expected.

    A thread, not a step of the start-up: servers fetch their descriptors whenever they attach
    (restarts included), and the agent meanwhile waits on their control channels, where errors
    and protocol violations show up as they always do. The thread ends once every expected server
    is served (a restart starts another), so none runs beside the agent while it steps.
    """

    def __init__(self, path: str, segment_fd: int) -> None:
        self.path = path
        self._segment_fd = segment_fd
        self._expected: dict[bytes, list[int]] = {}
        self._lock = threading.Lock()
        self._socket = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self._socket.bind(path)
            os.chmod(path, 0o600)
            self._socket.listen(socket.SOMAXCONN)  # (hundreds of servers attach at once)
        except BaseException:
            self._socket.close()
            raise
        self._thread: Optional[threading.Thread] = None

    def expect(self, token: str, fds: list[int]) -> None:
        """Hand ``fds`` (after the ring's) to the server presenting ``token``; they are ours to close."""
        with self._lock:
            self._expected[token.encode()] = fds
            if self._thread is None:
                self._thread = threading.Thread(target=self._serve, name="portal-shm-ring-offer", daemon=True)
                self._thread.start()

    def forget(self, token: str) -> None:
        """A server that will not fetch its ends (it failed, or was replaced): close them."""
        with self._lock:
            fds = self._expected.pop(token.encode(), [])
        for fd in fds:
            os.close(fd)

    def _serve(self) -> None:
        while True:
            with self._lock:
                if not self._expected:
                    self._thread = None
                    return
            try:
                connection, _ = self._socket.accept()
            except OSError:
                return  # closed
            with connection:
                connection.settimeout(2.0)
                try:
                    token = connection.recv(_TOKEN_BYTES)
                except OSError:
                    continue
                with self._lock:
                    fds = self._expected.pop(token, None)
                if fds is None:
                    continue
                try:
                    connection.sendmsg(
                        [b"R"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [self._segment_fd] + fds))]
                    )
                except OSError:
                    pass  # the server went away: its start-up fails and is reported as such
                finally:
                    for fd in fds:
                        os.close(fd)

    def close(self) -> None:
        """Stop serving (before the ring's descriptor is closed) and remove the socket file."""
        try:
            self._socket.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        thread = self._thread
        if thread is not None:
            thread.join(timeout=2.0)
        self._socket.close()
        with self._lock:
            left, self._expected = list(self._expected.values()), {}
        for fds in left:
            for fd in fds:
                os.close(fd)
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass


def fetch_descriptors(path: str, token: str, count: int, timeout: float) -> list[int]:
    """Server side: present ``token`` on the agent's socket and return the ``count`` descriptors
    it sends (the ring's first)."""
    fd_size = array.array("i").itemsize
    deadline = time.monotonic() + timeout
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
        connection.settimeout(timeout)
        pause = 0.001
        while True:
            try:
                connection.connect(path)
                break
            except BlockingIOError:  # its backlog is full (hundreds of servers at once): again shortly
                if time.monotonic() + pause > deadline:
                    raise
                time.sleep(pause)
                pause = min(2 * pause, 0.05)
        connection.sendall(token.encode())
        data, ancillary, _, _ = connection.recvmsg(1, socket.CMSG_SPACE(count * fd_size))
    fds = array.array("i")
    for level, kind, payload in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(payload[: len(payload) - len(payload) % fd_size])
    if data != b"R" or len(fds) != count:
        for fd in fds:
            os.close(fd)
        raise ConnectionError(
            f"the agent's socket {path} did not send this server's ring and doorbells (a wrong or used token?)"
        )
    return list(fds)
