"""One agent's session on a host: its envs in an ordinary local VectorPortal, stepped on request.

Runs in a thread of its own, so that a slow start (containers, venv builds) or a long step never
holds up the host's other agents, its heartbeats or its router. It owns the local portal and
hands each result to the router as one message: the batch's arrays as frames, copied or
compressed out of the ring (the ring slot is reused while the bytes may still wait for the link).
"""

from __future__ import annotations

import functools
import logging
import os
import queue
import select
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Optional

import zmq

from ...agent.local.lockstep import NotFinished
from ...agent.vector import VectorPortal
from ...errors import HostPolicyError, InfoEncodingError, PortalError, PortalTimeoutError
from .. import codecs, frames
from ..error_data import to_data
from ..messages import CLOSE, FINISH, RESULT, SEND
from ..reliable import Sequencer
from .policy import HostPolicy
from .quotas import Limits
from .session_envs import SessionEnvs, open_portal
from .session_requests import SessionRequests

log = logging.getLogger("portal_shm.host")

_STOP = object()


@dataclass(frozen=True)
class SessionContext:
    """What a session needs of its host, given at construction (a session holds no host)."""

    context: zmq.Context[Any]  # the host's ZeroMQ context, for the session's socket to the router
    outbox_address: str  # where the router takes the session's messages from
    policy: HostPolicy
    host_name: str
    limits: Limits
    usage: Callable[[str], dict[str, Any]]  # an agent key's usage against the limits (Quotas.usage)
    step_timeout: float  # the longest a step of the session's envs may take (--step-timeout)


class HostSession(threading.Thread):
    """The envs of one agent (one link) on this host, and the thread that steps them."""

    def __init__(
        self, ctx: SessionContext, identity: bytes, client: str, hello: dict[str, Any], user: str = ""
    ) -> None:
        super().__init__(name=f"portal-shm session {client}", daemon=True)
        self.ctx = ctx
        self.identity = identity
        self.client = client
        self.user = user  # the CURVE key that opened it: the only one it answers
        self.hello = hello
        self.runtime = str(hello.get("runtime"))[:40]  # what errors and the welcome name, never a pid or path
        self.refused = 0  # messages another key sent with this session's routing id
        self.dropped = False  # fell behind its acknowledgements and was dropped
        self.undelivered: Optional[list[Any]] = None  # frames the thread could not send (the router sends them)
        self.num_envs = int(hello["num_envs"])
        self.reserved = True  # its envs count against the host's limits (until it was refused or failed to start)
        self.seq = Sequencer()
        self.seq.received = 1  # the hello
        self.inbox: queue.Queue[Any] = queue.Queue()
        self.stats = frames.WireStats()
        self.codec = codecs.NONE
        self.portal: Optional[VectorPortal] = None
        self.fd: Optional[int] = None  # the connection the agent's messages last came on
        self.gone_since: Optional[float] = None  # when that connection dropped
        self.last_ping_ack = -1
        self.finished = threading.Event()
        self._out: Optional[zmq.Socket[Any]] = None
        self._envs: Optional[SessionEnvs] = None  # once started: how the agent steps them, their arrays' layout
        self.started = False  # the envs run and the welcome went out
        self.busy = False  # the thread has a request of the router's in hand
        self.inline: Optional[dict[str, Any]] = None  # a lockstep step the router thread drives (see begin_inline)
        self._wake_r, self._wake_w = os.pipe()  # rung with each request: the thread may sleep on servers
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)

    # -- router side ------------------------------------------------------------------------
    MAX_QUEUED = 1024  # requests waiting for the thread: more is a flood, not an agent waiting for replies

    def deliver(self, header: dict[str, Any], arrays: list[Any]) -> None:
        if header["cmd"] == CLOSE and self.busy:
            self._abort()  # the agent is done with a request still running (one that timed out on its side)
        if self.inbox.qsize() >= self.MAX_QUEUED:
            raise PortalError(f"the agent sent more than {self.MAX_QUEUED} requests without waiting for replies")
        self.busy = True
        self._put((header, arrays))

    @property
    def behind(self) -> bool:
        """Whether the agent left more replies unacknowledged than the host's limit."""
        return self.seq.unacked_bytes > self.ctx.limits.max_unacked_bytes

    @property
    def envs(self) -> VectorPortal:
        """The session's local portal, once started (every request comes after its start)."""
        portal = self.portal
        if portal is None:
            raise PortalError("this session's envs are not started")
        return portal

    def error_data(self, exc: BaseException) -> dict[str, Any]:
        """``exc`` as an error message naming this session's runtime kind, nothing of the host's."""
        return to_data(exc, self.runtime)

    def _put(self, item: Any) -> None:
        """Into the inbox, waking the thread where it sleeps on its servers' pipes too."""
        self.inbox.put(item)
        try:
            os.write(self._wake_w, b"\0")
        except (BlockingIOError, OSError):
            pass  # full: the thread wakes anyway

    # -- the router's fast path ---------------------------------------------------------------
    # A lockstep step is started and finished by the router thread itself: the servers' done
    # pipes join its poller, and the reply leaves without passing through this thread (a thread
    # hop each way costs more than a null env's whole step). A step still running after
    # ``HANDOVER_SECONDS`` (a slow env, a hung or restarting server) is finished by this thread,
    # with step_timeout and recovery as the local portal applies them.
    HANDOVER_SECONDS = 0.02

    def can_step_inline(self) -> bool:
        """Whether the router may drive the next step: never where starting it could wait (a
        recycler's swap waits for a spare's reply, actions without a fixed layout are messages)."""
        envs = self._envs
        if not self.started or envs is None or self.busy or envs.batched or envs.whole or self.inline is not None:
            return False
        return envs.act_fixed and not envs.recycling and not self.envs.recovering

    def begin_inline(self, header: dict[str, Any], arrays: list[Any]) -> list[Any]:
        """Start the step (actions into the ring, servers rung); the done fds the router polls."""
        self.envs.step_async(self._session_envs().actions(header, arrays, self.num_envs))
        self.inline = {"seq": header["seq"], "since": time.monotonic()}
        return [done.fd for done in self.envs.doorbells()]

    def inline_done(self, readable: Any) -> Optional[bool]:
        """Whether every server finished the router's step, never waiting (None: a server's pipe
        closed or a restart is due: its thread must see to it)."""
        return self.envs.step_finished(readable)

    def inline_awaits(self) -> list[Any]:
        """What the router's poller should watch for the step besides the done fds: the control
        sockets of servers whose message is still on its way."""
        return self.envs.awaited_messages()

    def finish_inline(self) -> list[Any]:
        """The reply's frames, once every server is done (the router saw all done fds readable)."""
        seq, self.inline = self._inline_seq(), None
        try:
            obs, reward, terminated, truncated, infos = self.envs.step_wait_now()
            return self._result_frames(seq, obs, (reward, terminated, truncated), infos, self.num_envs)
        except NotFinished:
            raise  # an env that went back on its status: the router ends the session (never waits)
        except Exception as exc:
            return self.numbered_frames({**self.error_data(exc), "re": seq})

    def _inline_seq(self) -> int:
        if self.inline is None:
            raise PortalError("no lockstep step of the router's is running")
        return int(self.inline["seq"])

    def hand_over(self) -> None:
        """The step is taking long: this thread waits for it instead of the router."""
        self.busy = True
        self.inbox.put(({"cmd": FINISH, "seq": self._inline_seq()}, []))
        self.inline = None

    def close_pipes(self) -> None:
        """After the thread finished and the router dropped the session (only the router writes)."""
        for fd in (self._wake_r, self._wake_w):
            if fd >= 0:
                os.close(fd)
        self._wake_r = self._wake_w = -1

    def stop(self) -> None:
        """Free the envs: at once when the thread is idle, by stopping the servers under a request that
        is still running (a hung env would keep the thread, and the envs, forever)."""
        if self.busy:
            self._abort()
        self._put(_STOP)

    def abort(self) -> None:
        """Stop the envs' servers now, whatever the thread is doing (the host is stopping)."""
        self._abort()

    def _abort(self) -> None:
        portal = self.portal
        if portal is not None:  # (not from the router thread: stopping containers takes seconds)
            threading.Thread(target=portal.abort, name=f"portal-shm abort {self.client}", daemon=True).start()

    # -- session thread ---------------------------------------------------------------------
    def run(self) -> None:
        try:
            self._out = self.ctx.context.socket(zmq.PUSH)
            self._out.connect(self.ctx.outbox_address)
        except Exception as exc:  # (out of descriptors): the router answers the hello for it
            log.error("session %s cannot start: %s", self.client, exc)
            self.reserved = False
            self.undelivered = self.numbered_frames(
                {
                    **self.error_data(PortalError(f"the env host cannot take a session now ({exc}); try again later")),
                    "re": 1,
                }
            )
            if self._out is not None:
                self._out.close(0)
            self.finished.set()
            return
        try:
            requests = self._start()
            if requests is not None:
                self._serve(requests)
        except Exception as exc:  # a bug here must not take the host down: tell the agent and log
            log.exception("session %s failed", self.client)
            self._emit(self.error_data(exc))
        finally:
            self._free()
            self._out.close(linger=2000)
            self.finished.set()
            log.info("session %s ended: %d envs freed", self.client, self.num_envs)

    def _free(self) -> None:
        """Close the envs (again is a no-op); the router thread may still look at the closed portal."""
        if self.portal is not None:
            try:
                self.portal.close()
            except Exception:
                log.exception("closing the envs of %s", self.client)

    def _start(self) -> Optional[SessionRequests]:
        """The envs started and the agent welcomed (what answers its requests), or refused (None)."""
        hello = self.hello
        try:
            self.portal, modes = open_portal(hello, self.num_envs, self.ctx.policy, self.ctx.step_timeout)
        except HostPolicyError as exc:
            log.warning("refused %s: %s", self.client, exc)
            self.reserved = False  # (before the agent hears of it: its next hello may come at once)
            self._emit({**self.error_data(exc), "re": 1})
            return None
        except Exception as exc:
            log.warning("session %s: cannot start %d x %s: %s", self.client, self.num_envs, hello.get("env_id"), exc)
            self.reserved = False  # (the portal cleaned up after itself)
            self._emit({**self.error_data(exc), "re": 1})
            return None
        portal = self.portal
        self._envs = envs = SessionEnvs(portal, modes)
        self.codec = codecs.host_choice(
            hello.get("codecs") or [], hello.get("compression"), codecs.is_image(envs.obs_schema)
        )
        log.info(
            "session %s: %d x %s on %s, codec %s; servers: %s",
            self.client,
            self.num_envs,
            hello["env_id"],
            hello["runtime"],
            self.codec,
            "; ".join(str(s["runtime"]) for s in portal.servers),  # (pids and paths: the host's log only)
        )
        self._emit(envs.welcome(self.runtime, self.codec, self.ctx.host_name))
        quota = functools.partial(self.ctx.usage, self.user)  # the agent key's usage against the limits
        requests = SessionRequests(
            envs, self.num_envs, self.ctx.policy, quota, self.runtime, self.client, self._emit, self._emit_result
        )
        self.started = True
        return requests

    def _serve(self, requests: SessionRequests) -> None:
        while True:
            item = self._next(requests)
            if item is _STOP:
                return
            if item is None:
                continue
            header, arrays = item
            cmd = header["cmd"]
            try:
                if cmd == CLOSE:  # answered once the envs are freed: the agent's close() means it
                    self._free()
                    self._emit({"cmd": RESULT, "re": header["seq"]})
                    return
                requests.handle(cmd, header, arrays)
            except PortalTimeoutError as exc:  # (not restarted: the agent asked for no restarts, or none is left)
                self._end_wedged(exc, None if cmd == SEND else header.get("seq"))
                return
            except Exception as exc:
                if isinstance(exc, (frames.FrameError, KeyError, TypeError, ValueError)) and not isinstance(
                    exc, PortalError
                ):
                    log.warning("session %s: bad %s request: %s", self.client, cmd, exc)
                # A send is answered by batches, not by a reply: its error is one of them (no "re").
                re = None if cmd == SEND else header.get("seq")
                self._emit({**self.error_data(exc), **({} if re is None else {"re": re})})
            finally:
                self.busy = False

    def _end_wedged(self, exc: PortalTimeoutError, re: Any) -> None:
        """An env that overran the step timeout is wedged (hung, or hostile): its servers are
        stopped (``_free``, by the caller's ``finally``) and its agent told, so it never holds the
        session's thread, its envs or the host's shutdown."""
        log.error(
            "session %s: an env is wedged, ending the session (portal-shm host --step-timeout): %s", self.client, exc
        )
        error = PortalTimeoutError(f"{exc}; the env host ended this session (portal-shm host --step-timeout)")
        self._emit({**self.error_data(error), **({} if re is None else {"re": re})})

    # While async batches step, the thread looks for finished servers and for the agent's requests
    # in turn, sleeping on both at once (the servers' done pipes and the inbox's wake pipe): blocking
    # in the local recv() would leave envs the agent just sent waiting in the inbox, and the servers
    # idle, until some other batch finished; polling would take the cores the envs need.
    STALL_SECONDS = 0.05  # then recv() itself waits, checking for dead and hung servers as it does

    def _next(self, requests: SessionRequests) -> Any:
        """The agent's next request; while envs of async batches step, finished batches first."""
        if not requests.awaiting_batch:
            return self.inbox.get()
        portal = self.envs
        deadline = time.monotonic() + self.STALL_SECONDS
        while True:
            if portal.batch_ready():
                requests.ship_batch()
                return None
            try:
                return self.inbox.get_nowait()
            except queue.Empty:
                pass
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                requests.ship_batch()
                return None
            done = [waiter for waiter in portal.doorbells() if not waiter.closed]
            poller = select.poll()  # (not select: hundreds of servers hold descriptors above 1024)
            for fd in [self._wake_r] + [w.fd for w in done]:
                poller.register(fd, select.POLLIN)
            readable = {fd for fd, _ in poller.poll(int(remaining * 1000) + 1)}
            for waiter in done:
                if waiter.fd in readable:
                    waiter.take()  # the status words say who finished; the rings only wake us
            if self._wake_r in readable:
                try:
                    os.read(self._wake_r, 4096)
                except BlockingIOError:
                    pass

    def _session_envs(self) -> SessionEnvs:
        envs = self._envs
        if envs is None:
            raise PortalError("this session's envs are not started")
        return envs

    def _emit_result(
        self, seq: Optional[int], obs: Any, flags: Any, infos: dict[str, Any], count: int, env_ids: Any = None
    ) -> None:
        self._send(self._result_frames(seq, obs, flags, infos, count, env_ids))

    def _result_frames(
        self, seq: Optional[int], obs: Any, flags: Any, infos: dict[str, Any], count: int, env_ids: Any = None
    ) -> list[Any]:
        try:
            header, arrays, compressible = self._session_envs().result(seq, obs, flags, infos, count, env_ids)
        except InfoEncodingError as exc:  # a value its agent cannot receive as it is: the step's error
            return self.numbered_frames({**self.error_data(exc), **({} if seq is None else {"re": seq})})
        return self.numbered_frames(header, arrays, compressible)

    def _emit(self, header: dict[str, Any], arrays: Any = (), compressible: int = 0) -> None:
        self._send(self.numbered_frames(header, arrays, compressible))

    def numbered_frames(self, header: dict[str, Any], arrays: Any = (), compressible: int = 0) -> list[Any]:
        """A numbered, framed message, kept until the agent acknowledges it (the router sends it too:
        an error of a step it began inline)."""
        header = self.seq.stamp(header)
        try:
            data = frames.pack(header, arrays, self.codec, self.stats, compressible)
        except Exception as exc:  # values an agent cannot receive (unpackable infos or call results)
            data = frames.pack(
                {**self.error_data(exc), "re": header.get("re"), "seq": header["seq"], "ack": header["ack"]}
            )
        if not self.dropped:  # (a dropped session's window stays empty: nothing is resent)
            self.seq.keep(header["seq"], data)
        return data

    def _send(self, data: list[Any]) -> None:
        """To the agent through the router (only the router thread may use the host's socket)."""
        out = self._out
        if out is None:
            raise PortalError("the session's thread has no socket to the router")
        out.send_multipart([self.identity] + data, copy=False)
