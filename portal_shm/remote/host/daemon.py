"""``portal-shm host``: the daemon on an env machine that runs envs for agents elsewhere.

One port for everything: a ROUTER socket, CURVE-encrypted and accepting only the client keys it
was given (``--insecure`` aside), with a cap on message size. For each agent that says hello it
starts a ``HostSession`` (the agent's envs in a local VectorPortal, in a thread of their own) and
routes that agent's messages to it. It answers heartbeats itself, so a long step never looks like
a dead host, and it frees a session's envs when the agent's connection has been gone for half the
heartbeat timeout, after libzmq's own heartbeats (the other half) gave up on a silent peer.

It never runs code an agent ships, nor anything its operator did not allow: every hello is checked
against the host's ``HostPolicy`` (env ids, entry points, runtimes and their options, kwargs), and
what runs is built from the operator's values (``host_policy``).
"""

from __future__ import annotations

import gc
import logging
import os
import secrets
import signal
import threading
import time
from typing import Any, Optional, cast

import zmq
import zmq.auth
from zmq.auth.thread import ThreadAuthenticator
from zmq.utils.monitor import parse_monitor_message

from ...errors import PortalError
from .. import frames, keys
from ..error_data import redact, to_data
from ..messages import ERROR, FROM_AGENTS, HELLO, PING, PONG, STEP, UNKNOWN_SESSION
from .client_keys import ClientKeys
from .hello import hello_problem
from .inline_steps import InlineSteps
from .options import DEFAULT_PORT, HostOptions
from .quotas import MAX_SESSIONLESS_BYTES, Quotas
from .run_dir import HostRunDir
from .session import HostSession, SessionContext

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
        self._held: set[bytes] = set()  # routing ids another key took over: their session's replies wait
        self._collect_at: Optional[float] = None  # when to run the cyclic collector (sessions ended)
        self._collected_at = 0.0
        self._opened = 0  # sessions opened so far: the number in their log lines
        self._stop = threading.Event()
        self._auth: Optional[ThreadAuthenticator] = None
        self.public_key: Optional[str] = None
        self.public_key_path: Optional[str] = None
        self.freed: dict[str, Any] = {}  # what close() stopped: sessions, envs, env servers
        self.socket = self._bind()
        self.address = self.socket.getsockopt_string(zmq.LAST_ENDPOINT)
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

    # -- setup ---------------------------------------------------------------------------------
    def _bind(self) -> zmq.Socket[Any]:
        o = self.options
        socket = self.context.socket(zmq.ROUTER)
        # A routing id stays with the connection that holds it: another connection presenting it
        # (another key that learnt it) is refused by libzmq until the holder's connection is gone.
        socket.setsockopt(zmq.ROUTER_HANDOVER, 0)
        socket.setsockopt(zmq.MAXMSGSIZE, o.max_message_bytes)
        # Bounded queues per connection: an agent that stops reading makes the host drop its replies
        # (its resend window has them), never hold them without end.
        socket.setsockopt(zmq.SNDHWM, 64)
        socket.setsockopt(zmq.RCVHWM, 64)
        socket.setsockopt(zmq.LINGER, 0)
        half = max(1, int(o.heartbeat_timeout * 500))
        socket.setsockopt(zmq.HEARTBEAT_IVL, min(1000, half))
        socket.setsockopt(zmq.HEARTBEAT_TIMEOUT, half)
        socket.setsockopt(zmq.HEARTBEAT_TTL, half)
        if not o.insecure:
            try:
                public, secret, path = keys.ensure_host_keys(o.keys_dir)
                self.public_key, self.public_key_path = public.decode("ascii"), path
                clients = o.clients_dir or os.path.join(os.path.dirname(path), "clients")
                os.makedirs(clients, mode=0o700, exist_ok=True)
                self._clients = ClientKeys(clients)
            except (PortalError, OSError):
                socket.close(0)
                self.context.term()
                raise
            self._auth = ThreadAuthenticator(self.context, log=logging.getLogger("portal_shm.host.zap"))
            self._auth.start()
            self._auth.configure_curve_callback("portal-shm", credentials_provider=self._clients)
            socket.setsockopt(zmq.CURVE_SERVER, 1)
            socket.setsockopt(zmq.CURVE_PUBLICKEY, public)
            socket.setsockopt(zmq.CURVE_SECRETKEY, secret)
            socket.setsockopt(zmq.ZAP_DOMAIN, b"portal-shm")
        self._monitor = socket.get_monitor_socket(zmq.EVENT_DISCONNECTED)
        try:
            socket.bind(o.bind)
        except zmq.ZMQError as exc:
            socket.close(0)
            raise PortalError(f"cannot bind {o.bind}: {exc}; pick another port or stop what holds it") from None
        self._outbox = self.context.socket(zmq.PULL)
        self._outbox.bind(self.outbox_address)
        return socket

    # -- the loop --------------------------------------------------------------------------------
    REAP_SECONDS = 0.05  # how often the loop looks for sessions to free (not on every message)

    def serve(self) -> None:
        poller = self._poller
        for socket in (self.socket, self._outbox, self._monitor):
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
        if self._outbox in events:
            for _ in range(256):  # (readiness asked, not zmq.Again raised: an exception per step costs)
                if not int(self._outbox.getsockopt(_EVENTS)) & _POLLIN:
                    break
                message = self._outbox.recv_multipart(copy=False)
                if not self._held or message[0].bytes not in self._held:
                    self.socket.send_multipart(message, copy=False)
        if self.socket in events:
            for _ in range(256):
                if not int(self.socket.getsockopt(_EVENTS)) & _POLLIN:
                    break
                self._route(self.socket.recv_multipart(copy=False))
        if self._monitor in events:
            self._disconnected(dict(parse_monitor_message(self._monitor.recv_multipart())))
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
                log.exception("dropped a message from %s that broke the router", self._who(message[0]))

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
            log.warning("dropped a malformed message from %s: %s", self._who(frame), exc)
            self._reply(identity, {"cmd": ERROR, "kind": "ServerProtocolError", "message": f"malformed: {exc}"})
            return
        cmd = header["cmd"]
        if cmd not in FROM_AGENTS:
            self._refuse(frame, f"a request {cmd[:40]!r}, which hosts do not take from agents")
            return
        if session is not None and not self._owner(session, frame):
            return
        if session is not None:
            session.fd = self._fd(frame)
            session.gone_since = None
        if cmd == PING:
            self._pong(identity, session, header)
        elif cmd == HELLO:
            if session is None:
                self._hello(identity, header, frame, data)
        elif session is None:
            self._reply(identity, {"cmd": UNKNOWN_SESSION})
        else:
            session.seq.acknowledged(header.get("ack"))
            try:
                arrays = frames.unpack_arrays(header, data, codecs_allowed=(), max_bytes=self.limits.max_decoded_bytes)
            except frames.FrameError as exc:
                log.warning("session %s: dropped a malformed %s: %s", session.client, cmd, exc)
                flag = " (portal-shm host --max-decoded-bytes)" if "bytes of arrays" in str(exc) else ""
                self._reply(
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
        log.warning("refused %s: %s", self._who(frame), what)
        self._reply(frame.bytes, {"cmd": ERROR, "kind": kind, "message": f"refused {what}"})

    def _owner(self, session: HostSession, frame: Any) -> bool:
        """Whether the message came with the key that opened ``session`` (ZeroMQ's ``User-Id``, the
        CURVE key the handshake proved). Another key presenting the session's routing id holds that
        id's connection now: its message is refused, and the session's replies wait (resent from
        its window) until its own key speaks on it again."""
        user = self._user(frame)
        if user == session.user:
            if self._held and session.identity in self._held:
                self._held.discard(session.identity)
                log.warning("session %s: its own key is back on its connection; its replies flow again", session.client)
            return True
        session.refused += 1
        if session.refused == 1 or session.refused % 1000 == 0:
            log.warning(
                "refused %d message(s) for session %s from another key (%s): a session belongs to the key that "
                "opened it; its replies wait until that key is back",
                session.refused,
                session.client,
                self._who(frame),
            )
        self._held.add(session.identity)
        self._reply(
            session.identity,
            {"cmd": ERROR, "kind": "PortalError", "message": "refused: this connection's id belongs to another key"},
        )
        return False

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
        if not self._held or session.identity not in self._held:
            self.socket.send_multipart([session.identity] + data, copy=False)

    def _pong(self, identity: bytes, session: Optional[HostSession], header: dict[str, Any]) -> None:
        if session is None:
            self._reply(identity, {"cmd": UNKNOWN_SESSION})
            return
        seq = session.seq
        ack = header.get("ack")
        seq.acknowledged(ack)
        if seq.behind and ack == session.last_ping_ack:  # the agent made no progress since its last ping
            for data in seq.unacknowledged():
                self._send(session, data)
        session.last_ping_ack = ack if isinstance(ack, int) else -1
        self._reply(identity, {"cmd": PONG, "ack": seq.received, "sent": seq.sent})

    def _hello(self, identity: bytes, header: dict[str, Any], frame: Any, data: list[Any]) -> None:
        client = self._who(frame)
        user = self._user(frame)
        problem = hello_problem(header, data) or self.quotas.hello_problem(
            self.sessions.values(), user, header["num_envs"], header.get("vector")
        )
        if problem:
            log.warning("refused %s: %s", client, problem)
            self._reply(
                identity, {"cmd": ERROR, "kind": "PortalError", "message": problem, "seq": 1, "ack": 1, "re": 1}
            )
            return
        self._opened += 1
        try:
            # "<peer> (<key file>) #<n>": what every log line of the session names it by
            session = HostSession(self._session_context, identity, f"{client} #{self._opened}", header, user)
        except OSError as exc:  # out of descriptors for its wake pipe
            log.error("refused %s: cannot make a session: %s", client, exc)
            self._reply(
                identity,
                {
                    "cmd": ERROR,
                    "kind": "PortalError",
                    "message": f"host {self.name} cannot take a session now ({exc.strerror}); try again later",
                    "seq": 1,
                    "ack": 1,
                    "re": 1,
                },
            )
            return
        session.fd = self._fd(frame)
        self.sessions[identity] = session
        try:
            session.start()
        except RuntimeError as exc:  # no thread to be had
            del self.sessions[identity]
            session.close_pipes()
            log.error("refused %s: cannot start a session thread: %s", client, exc)
            self._reply(
                identity,
                {
                    "cmd": ERROR,
                    "kind": "PortalError",
                    "message": f"host {self.name} cannot take a session now (no thread to run it); try again later",
                    "seq": 1,
                    "ack": 1,
                    "re": 1,
                },
            )

    def _describe(self) -> dict[str, Any]:
        return {"kind": "host", "name": self.name, "address": self.address}

    def usage_report(self) -> dict[str, Any]:
        """The host's usage against its limits, in all and per agent key: what ``top`` shows."""
        sessions = list(self.sessions.values())
        names = {} if self.options.insecure else self._clients.allowed()
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

    def _reply(self, identity: bytes, header: dict[str, Any]) -> None:
        self.socket.send_multipart([identity] + frames.pack(header))

    @staticmethod
    def _fd(frame: Any) -> Optional[int]:
        try:
            fd = frame.get(zmq.SRCFD)
            return fd if isinstance(fd, int) else None
        except zmq.ZMQError:
            return None

    def _user(self, frame: Any) -> str:
        """The CURVE public key (Z85) the message's connection proved; "" on an insecure host."""
        if self.options.insecure:
            return ""
        try:
            return cast(str, frame.get("User-Id"))  # (a str whenever CURVE is on)
        except zmq.ZMQError:
            return "?"

    def _who(self, frame: Any) -> str:
        try:
            peer = frame.get("Peer-Address")
        except zmq.ZMQError:
            peer = "?"
        if self.options.insecure:
            return f"{peer} (insecure)"
        try:
            key = frame.get("User-Id")
        except zmq.ZMQError:
            key = "?"
        name = self._clients.allowed().get(key.encode("ascii"), "?") if key != "?" else "?"
        return f"{peer} ({name})"

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
            self._held.discard(identity)
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
        self._reply(
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
        o = self.options
        lines = [f"portal-shm host {self.name} at {self.address}"]
        if o.insecure:
            lines.append("  INSECURE: no encryption, no authentication (--insecure)")
        else:
            accepted = sorted(self._clients.allowed().values())
            lines += [
                f"  public key  {self.public_key}  (agents pin it: host_key= this or a copy of {self.public_key_path})",
                f"  clients     {self._clients.directory}: {len(accepted)} agent key(s)"
                + (
                    f" ({', '.join(accepted[:8])}{', ...' if len(accepted) > 8 else ''})"
                    if accepted
                    else "; copy each agent's USER@HOST.key there"
                ),
            ]
        lines += self.limits.describe()
        lines.append(f"  agents may run: {self.policy.describe()}")
        return "\n".join(lines)

    def close(self) -> None:
        """Stop every session (its envs and env servers first), then the sockets; ``freed`` says what went."""
        live = list(self.sessions.values())
        self.freed = {
            "sessions": len(live),
            "envs": sum(s.num_envs for s in live if s.started),
            "servers": sum(_server_count(s) for s in live),
        }
        for session in live:
            session.stop()
        stuck = self._wait_finished(live, self.CLOSE_SECONDS)
        if stuck:  # (closing their envs hangs: an env's close(), a runtime that does not stop)
            for session in stuck:
                session.abort()
            stuck = self._wait_finished(stuck, self.ABORT_SECONDS)
        for session in stuck:
            log.error("session %s did not end within %.0f s of the host's stop: leaving it", session.client,
                      self.CLOSE_SECONDS + self.ABORT_SECONDS)  # fmt: skip
        self.sessions.clear()
        if self._auth is not None:
            self._auth.stop()
            self._auth = None
        for socket in (self._monitor, self._outbox, self.socket):
            socket.close(0)
        if not stuck:  # (term() waits for every socket of the context, a stuck session's among them)
            self.context.term()
        self._run_dir.release()

    CLOSE_SECONDS = 10.0  # for sessions to close their envs when the host stops, then they are stopped
    ABORT_SECONDS = 5.0

    @staticmethod
    def _wait_finished(sessions: list[HostSession], seconds: float) -> list[HostSession]:
        """Wait up to ``seconds`` in all for ``sessions`` to end; those that did not."""
        deadline = time.monotonic() + seconds
        stuck = []
        for session in sessions:
            if session.finished.wait(max(0.0, deadline - time.monotonic())):
                session.close_pipes()
            else:
                stuck.append(session)
        return stuck


def _server_count(session: HostSession) -> int:
    portal = session.portal
    try:
        return len(portal.servers) if portal is not None else 0
    except Exception:  # a portal that failed half-way through its start
        return 0


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
