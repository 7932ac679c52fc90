"""Warm spares: a server's successor started ahead of time, then swapped in at its envs' episode end.

A spare is started (forked from a zygote of its runtime where it can be, else a fresh runtime),
polled until it made its envs and said hello with the same spaces as the server it replaces (and,
where it can stand by, attached to the ring with doorbells of its own, reading nothing there until
the swap rings it), then swapped in: the old server closes its envs and exits, reaped later, and
the spare takes its mailbox row. The session keeps the spares and retired servers it owns, so a
portal that dies stops them too; this module is their lifecycle.
"""

from __future__ import annotations

import time
from typing import Iterator

from ...errors import ServerProtocolError
from ...wire import protocol
from ..local.session import PortalSession, ServerLink, Spare


class Spares:
    """The spares of one portal's servers (``session.spares``: server index -> its spare)."""

    def __init__(self, session: PortalSession, fork: bool) -> None:
        self.session = session
        self.fork = fork  # spares come from zygotes where the backend can fork

    def __contains__(self, index: int) -> bool:
        return index in self.session.spares

    def __iter__(self) -> Iterator[int]:
        return iter(self.session.spares)

    def start(self, server: ServerLink) -> Spare:
        """Start a spare runtime for ``server``'s envs (not waited for: ``ready`` says when)."""
        session = self.session
        spare = session.start_runtime(server, session.next_generation(), fork=self.fork)
        session.spares[server.index] = spare
        return spare

    def ready(self, server: ServerLink) -> bool:
        """Whether ``server``'s spare made its envs, said hello and (where it can stand by) is
        attached (never waits); raises when it failed: died, an env could not be made, or it
        describes other spaces than ``server``."""
        session = self.session
        spare = session.spares[server.index]
        if spare.ready:
            return True
        if not spare.channel.socket.poll(0):
            spare.check_alive()
            return False
        message = spare.channel.recv(lambda: None, 1.0, f"start-up of the spare of {server.describe()}")
        if message["cmd"] == protocol.ERROR:
            raise server.error(message)
        expected = protocol.HELLO if spare.hello is None else protocol.READY
        if message["cmd"] != expected:
            raise ServerProtocolError(f"the spare of {server.describe()} sent {message['cmd']!r:.40} at start-up")
        if spare.hello is None:
            assert server.hello is not None
            session.check_spaces(server, server.hello, message, "spare of")  # (spaces already checked once)
            spare.hello = session.checked_hello(server, message, spaces=False)
            spare.startup_s = time.monotonic() - spare.started
            if spare.hello.get("standby") is True:
                self._attach_standby(spare)
                return False
        spare.ready = True
        return True

    def _attach_standby(self, spare: Spare) -> None:
        """Hand a spare the ring and doorbells of its own now; it stands by until the swap rings it."""
        spare.go, spare.done = self.session.new_doorbells(spare.token)
        spare.channel.send({**self.session.attach_message(), "standby": True}, spare.check_alive)

    def discard(self, server: ServerLink) -> None:
        """Stop ``server``'s spare, if it has one."""
        spare = self.session.spares.pop(server.index, None)
        if spare is not None:
            spare.handle.stop(timeout=1.0)
            self.session.release_spare(spare)

    def swap(self, server: ServerLink, timeout: float, closed: bool = False, held: bool = False) -> None:
        """Put ``server``'s ready spare in its place: the old server closes its envs and exits
        (reaped later by ``reap``) before the spare gets its mailbox (and, unless it stood by
        attached, its doorbells and the ring).
        ``closed``: it already answered its last command and is closing (``then_close``);
        ``held``: it retired and reads only its control socket, where it is told CLOSE."""
        session = self.session
        spare = session.spares.pop(server.index)
        ring, offer = session.attached()
        old = server.handle
        try:
            if held:
                server.channel.send({"cmd": protocol.CLOSE}, server.check_alive, timeout=1.0)
            elif not closed:
                server.channel.send({"cmd": protocol.CLOSE}, server.check_alive, timeout=1.0)
                server.post_control()
                server.recv(min(timeout, 5.0), "close")  # a REPLY, or the error of an env's close()
        except Exception:
            if old is not None:
                old.stop(timeout=0)  # it is retired either way; past its answer it touches no row
        if old is not None:
            session.retired.append(old)
        server.channel.close(linger_ms=1000 if held else 0)
        offer.forget(server.token)
        server.adopt(spare)
        if spare.go is None or spare.done is None:
            session.attach_fresh(server, timeout)
            return
        ring.views["mailbox"][server.index][:] = 0
        session.take_row(server, spare.go, spare.done)

    def reap(self) -> None:
        """Forget retired servers that have exited (their runtimes cleaned up)."""
        retired = self.session.retired
        for handle in [h for h in retired if h.exit_status() is not None]:
            handle.stop(timeout=0.1)
            retired.remove(handle)
