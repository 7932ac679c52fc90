"""``portal-shm host``: the daemon on an env machine that runs envs for agents elsewhere.

One port for everything (``port.py``: CURVE-encrypted, only the client keys it was given). For
each agent that says hello it starts a ``HostSession`` (the agent's envs in a local VectorPortal,
in a thread of their own) and routes that agent's messages to it. It answers heartbeats itself,
so a long step never looks like a dead host, and it frees a session's envs when the agent's
connection has been gone for half the heartbeat timeout, after libzmq's own heartbeats (the other
half) gave up on a silent peer; a stopping host ends its sessions as ``shutdown.py`` says.

It never runs code an agent ships, nor anything its operator did not allow: every hello is checked
against the host's ``HostPolicy`` (env ids, entry points, runtimes and their options, kwargs), and
what runs is built from the operator's values (``policy.py``, ``runtime_offers.py``).
"""

from __future__ import annotations

import gc
import logging
import secrets
import signal
import threading
import time
from typing import Any, Optional

import zmq
from zmq.utils.monitor import parse_monitor_message

from ...errors import PortalError
from .. import frames
from ..error_data import redact, to_data
from ..messages import ERROR, FROM_AGENTS, HELLO, PING, PONG, STEP, UNKNOWN_SESSION
from .client_keys import ClientKeys
from .hello import hello_problem
from .inline_steps import InlineSteps
from .options import DEFAULT_PORT, HostOptions
from .port import HostPort
from .quotas import MAX_SESSIONLESS_BYTES, Quotas
from .run_dir import HostRunDir
from .session import HostSession, SessionContext
from .shutdown import stop_sessions

__all__ = ["DEFAULT_PORT", "ClientKeys", "Host", "HostOptions", "run_host"]

log = logging.getLogger("portal_shm.host")

_EVENTS, _POLLIN = int(zmq.EVENTS), int(zmq.POLLIN)


class Host:
    """The host daemon: ``Host(options).serve()`` until SIGTERM/SIGINT or ``stop()``."""

    def __init__(self, options: HostOptions) -> None:
        self.options = options
        options.check()
        self.policy = options.policy
        self.policy.check()
        self.name = options.name
        self.quotas = Quotas(options.limits(), options.name)
        self.limits = self.quotas.limits
        self.context = zmq.Context()
        self.outbox_address = f"inproc://portal-shm-outbox-{secrets.token_hex(4)}"
        self.sessions: dict[bytes, HostSession] = {}
        self._collect_at: Optional[float] = None  # when to run the cyclic collector (sessions ended)
        self._collected_at = 0.0
        self._opened = 0  # sessions opened so far: the number in their log lines
        self._stop = threading.Event()
        self.freed: dict[str, Any] = {}  # what close() stopped: sessions, envs, env servers
        try:
            self.port = HostPort(self.context, options, self.outbox_address)
        except BaseException:
            self.context.destroy(linger=0)
            raise
        self.address, self.public_key = self.port.address, self.port.public_key
        self._session_context = SessionContext(
            self.context,
            self.outbox_address,
            self.policy,
            self.name,
            self.limits,
            self.quota_usage,
            options.step_timeout,
        )
        self._run_dir = HostRunDir(self._describe, self.usage_report)
        self._poller = zmq.Poller()
        self._inline = InlineSteps(self._poller, self._send, self._fail)

    # -- the loop --------------------------------------------------------------------------------
    REAP_SECONDS = 0.05  # how often the loop looks for sessions to free (not on every message)

    def serve(self) -> None:
        poller = self._poller
        for socket in (self.port.socket, self.port.outbox, self.port.monitor):
            poller.register(socket, zmq.POLLIN)
        self._reap_at = 0.0
        try:
            while not self._stop.is_set():
                try:
                    self._turn(dict(poller.poll(5 if self._inline.active else 250)))
                except Exception:  # every session's work has its own boundary: this is the last line
                    log.exception("the host's loop met an error it survives")
                    time.sleep(0.01)
        finally:
            self.close()

    def _turn(self, events: dict[Any, int]) -> None:
        """One turn of the router: inline steps, replies out, messages in, lost connections, reaping."""
        if self._inline.active:
            self._inline.turn(events)
        router, outbox, monitor = self.port.socket, self.port.outbox, self.port.monitor
        if outbox in events:
            for _ in range(256):  # (readiness asked, not zmq.Again raised: an exception per step costs)
                if not int(outbox.getsockopt(_EVENTS)) & _POLLIN:
                    break
                self.port.send(outbox.recv_multipart(copy=False))
        if router in events:
            for _ in range(256):
                if not int(router.getsockopt(_EVENTS)) & _POLLIN:
                    break
                self._route(router.recv_multipart(copy=False))
        if monitor in events:
            self._disconnected(dict(parse_monitor_message(monitor.recv_multipart())))
        now = time.monotonic()
        if now >= self._reap_at:
            self._reap_at = now + self.REAP_SECONDS
            self._reap()
            self._run_dir.tick(now)

    def stop(self) -> None:
        self._stop.set()

    def _route(self, message: list[Any]) -> None:
        """One message from the network. Whatever it does, it ends at most its own sender's session:
        an exception on a session's behalf is that session's (``_fail``), never the host's."""
        session = self.sessions.get(message[0].bytes)
        try:
            self._take(message, session)
        except Exception as exc:
            if session is not None:
                self._fail(session, exc, "taking a message")
            else:
                log.exception("dropped a message from %s that broke the router", self.port.who(message[0]))

    def _take(self, message: list[Any], session: Optional[HostSession]) -> None:
        frame, data = message[0], message[1:]
        identity = frame.bytes
        if session is None and frames.message_bytes(data) > MAX_SESSIONLESS_BYTES:
            self._refuse(
                frame,
                f"a message of {frames.message_bytes(data):,} bytes from an agent with no session (a hello takes at "
                f"most {MAX_SESSIONLESS_BYTES:,}; its env kwargs at most 65,536 packed)",
                "HostPolicyError",
            )
            return
        try:
            header = frames.unpack_header(data)
        except frames.FrameError as exc:
            log.warning("dropped a malformed message from %s: %s", self.port.who(frame), exc)
            self.port.reply(identity, {"cmd": ERROR, "kind": "ServerProtocolError", "message": f"malformed: {exc}"})
            return
        cmd = header["cmd"]
        if cmd not in FROM_AGENTS:
            self._refuse(frame, f"a request {cmd[:40]!r}, which hosts do not take from agents")
            return
        if session is not None and not self.port.from_owner(session, frame):
            return
        if session is not None:
            session.fd = self.port.fd(frame)
            session.gone_since = None
        if cmd == PING:
            self._pong(identity, session, header)
        elif cmd == HELLO:
            if session is None:
                self._hello(identity, header, frame, data)
        elif session is None:
            self.port.reply(identity, {"cmd": UNKNOWN_SESSION})
        else:
            session.seq.acknowledged(header.get("ack"))
            try:
                arrays = frames.unpack_arrays(header, data, codecs_allowed=(), max_bytes=self.limits.max_decoded_bytes)
            except frames.FrameError as exc:
                log.warning("session %s: dropped a malformed %s: %s", session.client, cmd, exc)
                flag = " (portal-shm host --max-decoded-bytes)" if "bytes of arrays" in str(exc) else ""
                self.port.reply(
                    identity, {"cmd": ERROR, "kind": "ServerProtocolError", "message": f"malformed: {exc}{flag}"}
                )
                return
            if not session.seq.accept(header.get("seq")):
                return
            if cmd == STEP and session.can_step_inline():
                self._inline.begin(session, header, arrays)
            else:
                session.deliver(header, arrays)

    def _refuse(self, frame: Any, what: str, kind: str = "ServerProtocolError") -> None:
        log.warning("refused %s: %s", self.port.who(frame), what)
        self.port.reply(frame.bytes, {"cmd": ERROR, "kind": kind, "message": f"refused {what}"})

    def _fail(self, session: HostSession, exc: BaseException, doing: str, re: Any = None) -> None:
        """The error boundary of a session on the router: log with the cause, tell its agent, end it."""
        log.error(
            "session %s (%d envs): %s failed on the router: %s: %s; ending this session only",
            session.client,
            session.num_envs,
            doing,
            type(exc).__name__,
            exc,
            exc_info=exc,
        )
        self._inline.forget(session)
        try:
            error = PortalError(
                f"the env host ended this session: {doing} failed ({type(exc).__name__}: {redact(str(exc))[:300]}); "
                "its log names the cause"
            )
            self._send(session, session.numbered_frames({**to_data(error), "re": re}))
        except Exception:
            log.exception("session %s: its error could not be sent", session.client)
        session.stop()

    def _send(self, session: HostSession, data: list[Any]) -> None:
        """A session's message from the router thread (held while another key holds its id)."""
        self.port.send([session.identity] + data)

    def _pong(self, identity: bytes, session: Optional[HostSession], header: dict[str, Any]) -> None:
        if session is None:
            self.port.reply(identity, {"cmd": UNKNOWN_SESSION})
            return
        seq = session.seq
        ack = header.get("ack")
        seq.acknowledged(ack)
        if seq.behind and ack == session.last_ping_ack:  # the agent made no progress since its last ping
            for data in seq.unacknowledged():
                self._send(session, data)
        session.last_ping_ack = ack if isinstance(ack, int) else -1
        self.port.reply(identity, {"cmd": PONG, "ack": seq.received, "sent": seq.sent})

    def _hello(self, identity: bytes, header: dict[str, Any], frame: Any, data: list[Any]) -> None:
        client = self.port.who(frame)
        user = self.port.user(frame)
        problem = hello_problem(header, data) or self.quotas.hello_problem(
            self.sessions.values(), user, header["num_envs"], header.get("vector")
        )
        if problem:
            self._refuse_hello(identity, client, problem)
            return
        self._opened += 1
        try:
            # "<peer> (<key file>) #<n>": what every log line of the session names it by
            session = HostSession(self._session_context, identity, f"{client} #{self._opened}", header, user)
        except OSError as exc:  # out of descriptors for its wake pipe
            self._refuse_hello(identity, client, str(exc.strerror), exc)
            return
        session.fd = self.port.fd(frame)
        self.sessions[identity] = session
        try:
            session.start()
        except RuntimeError as exc:  # no thread to be had
            del self.sessions[identity]
            session.close_pipes()
            self._refuse_hello(identity, client, "no thread to run it", exc)

    def _refuse_hello(self, identity: bytes, client: str, problem: str, cause: Optional[Exception] = None) -> None:
        """The answer to a hello that opens no session: a problem of the hello's (logged as a warning),
        or the host's own (``cause``: logged as an error; the agent may try again later)."""
        if cause is None:
            log.warning("refused %s: %s", client, problem)
        else:
            log.error("refused %s: cannot make a session: %s", client, cause)
            problem = f"host {self.name} cannot take a session now ({problem}); try again later"
        self.port.reply(
            identity, {"cmd": ERROR, "kind": "PortalError", "message": problem, "seq": 1, "ack": 1, "re": 1}
        )

    def _describe(self) -> dict[str, Any]:
        return {"kind": "host", "name": self.name, "address": self.address}

    def usage_report(self) -> dict[str, Any]:
        """The host's usage against its limits, in all and per agent key: what ``top`` shows."""
        sessions = list(self.sessions.values())
        names = self.port.client_names()
        usage = {k: v for k, v in self.quotas.usage(sessions, "\0").items() if not k.startswith("agent_")}
        usage["unacked_bytes"][0] = max((s.seq.unacked_bytes for s in sessions), default=0)  # the most of one session
        return {
            "quota": usage,
            "per_agent": {"sessions": self.limits.max_sessions_per_agent, "envs": self.limits.max_envs_per_agent},
            "keys": self.quotas.by_key(sessions, names),
        }

    def quota_usage(self, user: str) -> dict[str, Any]:
        """Usage against the limits for key ``user`` and for the host (a session's ``stats()``)."""
        return self.quotas.usage(list(self.sessions.values()), user)

    def _disconnected(self, event: dict[str, Any]) -> None:
        now = time.monotonic()
        for session in self.sessions.values():
            if session.fd == event.get("value"):
                session.gone_since = now

    def _reap(self) -> None:
        grace = self.options.heartbeat_timeout / 2
        now = time.monotonic()
        for identity, session in list(self.sessions.items()):
            try:
                self._reap_one(identity, session, now, grace)
            except Exception as exc:
                self._fail(session, exc, "reaping")
        if self._collect_at is not None and now >= self._collect_at:
            # A closed portal's parts call back into it (reference cycles): its ring mapping and that
            # mapping's descriptor go when the cyclic collector runs. Run it once sessions have
            # ended, at most once a second (a few ms), so that an ended session leaves nothing held.
            self._collect_at, self._collected_at = None, now
            gc.collect()

    def _reap_one(self, identity: bytes, session: HostSession, now: float, grace: float) -> None:
        if session.gone_since is not None and now - session.gone_since > grace:
            log.warning(
                "agent %s gone for %.1f s: freeing its %d envs",
                session.client,
                now - session.gone_since,
                session.num_envs,
            )
            session.gone_since = None
            session.stop()
        if session.behind and not session.dropped:
            self._drop_behind(session)
        if session.finished.is_set():
            if session.undelivered:  # what its thread could not send (it had no socket)
                self._send(session, session.undelivered)
            del self.sessions[identity]
            self.port.released(identity)
            session.close_pipes()
            if self._collect_at is None:
                self._collect_at = max(now, self._collected_at + 1.0)

    def _drop_behind(self, session: HostSession) -> None:
        """A session whose agent left more replies unacknowledged than its limit: dropped, its
        window freed, and its agent told why."""
        session.dropped = True
        held = session.seq.unacked_bytes
        log.warning(
            "session %s fell behind: %d bytes of replies unacknowledged, limit %d (--max-unacked-bytes); dropping it",
            session.client,
            held,
            self.limits.max_unacked_bytes,
        )
        session.seq.forget()
        self.port.reply(
            session.identity,
            {
                "cmd": ERROR,
                "kind": "PortalError",
                "message": f"host {self.name} dropped this session: its agent left {held:,} bytes of replies "
                f"unacknowledged, past the limit {self.limits.max_unacked_bytes:,} (portal-shm host "
                "--max-unacked-bytes)",
            },
        )
        session.stop()

    def banner(self) -> str:
        """The start-up lines an operator needs: where agents connect, the key they pin, whose keys are
        accepted, and what agents may run here."""
        lines = [f"portal-shm host {self.name} at {self.address}", *self.port.describe()]
        lines += self.limits.describe()
        lines.append(f"  agents may run: {self.policy.describe()}")
        return "\n".join(lines)

    def close(self) -> None:
        """Stop every session (its envs and env servers first), then the sockets; ``freed`` says what went."""
        self.freed, stuck = stop_sessions(list(self.sessions.values()))
        self.sessions.clear()
        self.port.close()
        if not stuck:  # (term() waits for every socket of the context, a stuck session's among them)
            self.context.term()
        self._run_dir.release()


def run_host(options: HostOptions) -> None:
    """Serve until SIGTERM or SIGINT: the banner (``Host.banner``) at start, what was freed at the end."""
    host = Host(options)
    stopped_by: list[Any] = []

    def stop(signum: int, _frame: Any) -> None:
        stopped_by.append(signal.Signals(signum).name)
        host.stop()

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, stop)
    log.info("%s", host.banner())
    host.serve()
    freed = host.freed
    log.info(
        "portal-shm host %s stopped (%s): closed %d agent session(s), stopped %d env server(s) with %d env(s)",
        host.name,
        stopped_by[0] if stopped_by else "stop()",
        freed.get("sessions", 0),
        freed.get("servers", 0),
        freed.get("envs", 0),
    )
