"""Lockstep steps the host's router thread drives itself, for sessions whose servers answer fast.

A step is started and finished on the router: the servers' done pipes join its poller, and the
reply leaves without passing through the session's thread (a thread hop each way costs more than
a null env's whole step). A step still running after ``HostSession.HANDOVER_SECONDS`` (a slow env,
a hung or restarting server) is handed to the session's thread, which applies step_timeout and
recovery as the local portal does. Everything done here for a session is inside its error
boundary (``fail``): one session's step never ends the router. Nothing here waits on what a server
controls (an env runs in it, so it can write its status word, ring its pipe or promise a message
and never send it): the poller's readiness and the status words decide, and a server that goes
back on what they said ends its own session (``NotFinished``).
"""

from __future__ import annotations

import time
from typing import Any, Callable

import zmq

from .session import HostSession


class InlineSteps:
    def __init__(self, poller: zmq.Poller, send: Callable[[HostSession, list[Any]], None], fail: Callable[..., None]):
        self._poller = poller
        self._send = send  # a session's frames out (the router's socket)
        self._fail = fail  # the session's error boundary: (session, exc, doing, re)
        self._steps: dict[HostSession, list[Any]] = {}  # session -> what its step waits on (done fds, sockets)

    @property
    def active(self) -> bool:
        return bool(self._steps)

    def begin(self, session: HostSession, header: dict[str, Any], arrays: list[Any]) -> None:
        """Start the step (actions into the ring, servers rung); an error is the step's reply."""
        try:
            fds = session.begin_inline(header, arrays)
        except Exception as exc:
            session.inline = None
            self._send(session, session.numbered_frames({**session.error_data(exc), "re": header["seq"]}))
            return
        for fd in fds:
            self._poller.register(fd, zmq.POLLIN)
        self._steps[session] = fds

    def turn(self, events: dict[Any, int]) -> None:
        """Finish the steps whose servers are all done; hand slow ones to their thread. Every step is
        looked at on every turn (status words only): a server may finish without a ring of its own
        being in ``events`` (its message arrived, or another pipe woke the poll)."""
        now = time.monotonic()
        for session, watched in list(self._steps.items()):
            try:
                finished = session.inline_done(events)
                if finished:
                    self._end(session)
                    self._send(session, session.finish_inline())
                elif finished is None or now - session.inline["since"] > session.HANDOVER_SECONDS:  # type: ignore[index]
                    self._end(session)
                    session.hand_over()
                else:
                    for socket in session.inline_awaits():
                        if socket not in watched:
                            self._poller.register(socket, zmq.POLLIN)
                            watched.append(socket)
            except Exception as exc:
                self._fail(session, exc, "a lockstep step", (session.inline or {}).get("seq"))

    def forget(self, session: HostSession) -> None:
        """Drop ``session``'s step, whatever its state (its session is ending)."""
        for watched in self._steps.pop(session, None) or ():
            try:
                self._poller.unregister(watched)
            except (KeyError, ValueError):
                pass
        session.inline = None

    def _end(self, session: HostSession) -> None:
        for watched in self._steps.pop(session):
            self._poller.unregister(watched)
