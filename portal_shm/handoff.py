"""Handing the ring's descriptor to env servers over a unix socket (SCM_RIGHTS).

The ring is a memfd with no name (see ``ring``), so servers cannot open it: the agent listens on a
socket file in its run directory (0600, in a 0700 directory, which containers bind-mount) and
sends the descriptor to every server that connects (a server does when it gets its ATTACH). Every server gets the same
segment; which rows and doorbells are its own comes with the ATTACH message.
"""

from __future__ import annotations

import array
import os
import socket
import threading


class SegmentOffer:
    """The agent's listening socket, served by a thread for the portal's whole life.

    A thread, not a step of the start-up: servers fetch the ring whenever they attach (restarts
    included), and the agent meanwhile waits on their control channels, where errors and
    protocol violations show up as they always do.
    """

    def __init__(self, path: str, fd: int) -> None:
        self.path = path
        self._fd = fd
        self._socket = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self._socket.bind(path)
            os.chmod(path, 0o600)
            self._socket.listen(64)
        except BaseException:
            self._socket.close()
            raise
        self._thread = threading.Thread(target=self._serve, name="portal-shm-ring-offer", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                connection, _ = self._socket.accept()
            except OSError:
                return  # closed
            with connection:
                connection.settimeout(1.0)
                try:
                    connection.sendmsg([b"R"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [self._fd]))])
                except OSError:
                    pass  # the peer went away; a server that still wants the ring connects again

    def close(self) -> None:
        """Stop serving (before the ring's descriptor is closed) and remove the socket file."""
        try:
            self._socket.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._thread.join(timeout=2.0)
        self._socket.close()
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass


def fetch_segment(path: str, timeout: float) -> int:
    """Server side: connect to the agent's socket and return the descriptor it sends."""
    fd_size = array.array("i").itemsize
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
        connection.settimeout(timeout)
        connection.connect(path)
        data, ancillary, _, _ = connection.recvmsg(1, socket.CMSG_SPACE(fd_size))
    fds = array.array("i")
    for level, kind, payload in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(payload[:len(payload) - len(payload) % fd_size])
    if data != b"R" or len(fds) != 1:
        for fd in fds:
            os.close(fd)
        raise ConnectionError(f"the agent's socket {path} did not send the shared ring")
    return fds[0]
