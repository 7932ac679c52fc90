"""The agent's side of a portal's env servers: launching, handshakes and orderly shutdown.

A ``PortalSession`` owns everything a portal holds outside Python's heap (processes or
containers, sockets, the ring, the run directory) and releases it exactly once,
whether through ``close()``, garbage collection, interpreter exit or a failed start-up.
"""

from __future__ import annotations

import secrets
import time
from typing import Any, Callable, Optional, Sequence

import zmq

from ...errors import (
    EnvError,
    EnvNotFoundError,
    MessageTooBigError,
    ProtocolMismatchError,
    ServerDiedError,
    ServerProtocolError,
    env_error_class,
)
from ...runtimes.backend import Backend, ServerHandle, ServerLaunch
from ...runtimes.resources import PortalResources
from ...version import __version__
from ...wire.doorbell import Bell, Waiter, bell_pipe, close_all
from ...wire.handoff import SegmentOffer
from ...wire.info_codec import LOSSY, PICKLE, REFUSE
from ...wire.layout import CMD, SEQ, SLOT, STATUS, STATUS_PENDING
from ...wire.protocol import (
    ATTACH,
    CLOSE,
    CMD_CONTROL,
    CMD_RING_EARLY,
    ERROR,
    HELLO,
    KIND_INFO_ENCODING,
    KIND_MESSAGE_TOO_BIG,
    PROTOCOL_VERSION,
    READY,
    packb,
)
from ...wire.ring import Ring
from ..contract.start_progress import StartProgress
from ..contract.validate import check_error, check_hello, info_refusal
from .control import ControlChannel
from .spec import EnvSpec
from .zygotes import ForkedHandle, Zygotes, server_kind


class Spare:
    """A server started ahead of time for the envs of a ``ServerLink``: its runtime runs and made the
    envs (``hello`` is set once it said so). A server that can stand by is then attached to the
    ring at once, with doorbells of its own (``go``, ``done``; ``ready`` once it said so), but it
    reads nothing there until its doorbell rings, after the swap (``EnvServer.stand_by``), so it
    cannot take or touch the rows of the server it is to replace before that. Others are attached
    by the swap."""

    def __init__(
        self, generation: int, channel: ControlChannel, token: str, launch: ServerLaunch, handle: ServerHandle
    ) -> None:
        self.generation = generation
        self.channel = channel
        self.token = token
        self.launch = launch
        self.handle = handle
        self.hello: Optional[dict[str, Any]] = None
        self.go: Optional[Bell] = None
        self.done: Optional[Waiter] = None
        self.ready = False
        self.started = time.monotonic()
        self.startup_s: Optional[float] = None  # from its start to its hello

    def check_alive(self) -> None:
        status = self.handle.exit_status()
        if status is not None:
            launch = self.launch
            raise ServerDiedError(launch.server_index, launch.env_indices, status, self.handle.log_tail(), "spare")


class ServerLink:
    """The agent's view of one env server: its envs, channel, doorbells and backend handle.

    ``handle`` is None until its backend started it (a failed start-up leaves it so). The
    attributes declared below without a value do not exist before the server is started
    (``channel``, ``launch``: ``PortalSession._start_server``) and the ring attached (``go``,
    ``done``, ``mailbox``: ``PortalSession._arm``); everything that reads them runs after that,
    and what may run before (``shutdown``'s cleanup) asks for them with ``started_ends``.
    """

    channel: ControlChannel
    launch: ServerLaunch
    go: Bell
    done: Waiter
    mailbox: memoryview  # its row of the ring's mailboxes

    def __init__(self, index: int, env_indices: list[int], spec: EnvSpec) -> None:
        self.index = index
        self.env_indices = env_indices
        self.spec = spec
        self.handle: Optional[ServerHandle] = None
        self.token = ""  # what it presents to fetch the ring and its doorbell ends (``handoff``)
        self.hello: dict[str, Any] = {}
        self.generation = 0
        self.seq = 0  # commands posted to the current server
        self.controls = 0  # of which control commands
        #: A reply the agent takes before it posts this server anything more (``settle``).
        self.owed: Optional[Callable[[], None]] = None
        #: Its envs' rows of the ring (a server's envs are consecutive).
        self.rows = slice(env_indices[0], env_indices[-1] + 1)
        self.started = time.monotonic()  # (its current runtime's start: ``adopt``)
        #: Seconds from its runtime's start to its hello (``stats()``), None before it said hello.
        self.startup_s: Optional[float] = None

    def post(self, cmd: int, slot: int = 0, pending: bool = False, early: bool = False) -> None:
        """Post ``cmd`` in the server's mailbox and ring it awake; ``pending`` first marks its
        status PENDING, which the server overwrites once its results are in the ring. ``early``:
        the caller's wait watches the status after a ring (``spin.wait_written``), so a server that
        knows ``CMD_RING_EARLY`` is asked to ring before it writes the results.

        ``seq`` goes last: a server spinning on it sees the command's other words (x86 stores
        are seen in program order; elsewhere the agent does not ask servers to spin).
        """
        if self.owed is not None:
            self.settle()
        box = self.mailbox
        box[CMD] = cmd | CMD_RING_EARLY if early and self.hello.get("ring_early") is True else cmd
        box[SLOT] = slot
        if pending:
            box[STATUS] = STATUS_PENDING
        self.seq += 1
        box[SEQ] = self.seq
        self.go.ring()

    def settle(self) -> None:
        """Take the reply this server owes (a recycled server's ``set_state``, sent without waiting so
        that its restore runs while the agent goes on): its mailbox row holds one command at a time."""
        owed, self.owed = self.owed, None
        if owed is not None:
            owed()

    def adopt(self, started: Spare) -> None:
        """Take over a started runtime (its channel, handle and token) as this server's current one."""
        self.generation = started.generation
        self.channel = started.channel
        self.token = started.token
        self.launch = started.launch
        self.handle = started.handle
        self.started, self.startup_s = started.started, started.startup_s
        if started.hello is not None:
            self.hello = started.hello

    def runtime(self) -> str:
        """Its runtime's description ("not started" before its backend started it)."""
        return self.handle.describe() if self.handle is not None else "not started"

    def post_control(self) -> None:
        """Ring the server for a control message (counted apart: its steps are ``seq - controls``)."""
        self.controls += 1
        self.post(CMD_CONTROL)

    def forked(self) -> bool:
        """Whether its runtime was forked from a zygote (not started fresh)."""
        return isinstance(self.handle, ForkedHandle) and self.handle.fresh is None

    def describe(self) -> str:
        """'env server 1 (envs [2, 3]) [runtime: ...]': what every error about this server names."""
        return f"env server {self.index} (envs {self.env_indices}) [runtime: {self.runtime()}]"

    def check_alive(self) -> None:
        """Raise if the server exited, or if its control connection dropped while it runs (what it
        sent is lost: ``ControlChannel.check_connection``). For the slow path of waits."""
        handle = self.handle
        if handle is None:
            return
        status = handle.exit_status()
        if status is not None:
            raise ServerDiedError(self.index, self.env_indices, status, handle.log_tail(), handle.describe())
        self.channel.check_connection()

    def started_ends(self) -> tuple[Optional[ControlChannel], Optional[Bell], Optional[Waiter]]:
        """Its channel and doorbell ends, None for those it does not have (yet): for cleanups
        that may run before the server was started or the ring attached."""
        return getattr(self, "channel", None), getattr(self, "go", None), getattr(self, "done", None)

    def error(self, message: dict[str, Any]) -> EnvError:
        """The agent-side exception for an ERROR message this server sent (fields validated)."""
        env_index, phase, error_type, text, remote_traceback = check_error(message, self.env_indices)
        if message.get("kind") == KIND_MESSAGE_TOO_BIG:  # the server's own refusal: no env raised
            return MessageTooBigError(env_index, phase, error_type, text, remote_traceback, self.runtime())
        if message.get("kind") == KIND_INFO_ENCODING:  # an info value it may not send as it is: neither
            return info_refusal(message, env_index, phase, self.spec.backend.trust_boundary() or "", self.runtime())
        cls = EnvNotFoundError if error_type.endswith("EnvNotFound") else env_error_class(error_type)
        return cls(env_index, phase, error_type, text, remote_traceback, self.runtime())

    def recv(self, timeout: Optional[float], what: str) -> dict[str, Any]:
        """One message from this server; dead or silent servers raise, naming envs and runtime."""
        return self.channel.recv(self.check_alive, timeout, f"{what} of {self.describe()}")

    def errors(self, message: dict[str, Any]) -> list[EnvError]:
        """All env errors of one ERROR message: the first env's, then those of the server's other envs."""
        more = message.get("more")
        return [self.error(message)] + [
            self.error(m) for m in (more if isinstance(more, list) else []) if isinstance(m, dict)
        ]

    def expect(self, cmd: str, timeout: Optional[float], what: str) -> dict[str, Any]:
        message = self.recv(timeout, what)
        if message["cmd"] == ERROR:
            raise self.error(message)
        if message["cmd"] != cmd:
            raise ServerProtocolError(
                f"env server {self.index} sent {message['cmd']!r} during {what}, expected {cmd!r}"
            )
        return message

    def schemas(self, key: str) -> list[Any]:
        schemas: list[Any] = self.hello[key]  # a list: ``check_hello`` checked it
        return schemas


class PortalSession:
    """Servers and shared resources of one portal."""

    def __init__(self, base_dir: Optional[str] = None, lossy_infos: bool = False) -> None:
        self.resources = PortalResources(base_dir)
        self.lossy_infos = lossy_infos  # ``VectorOptions.infos == "lossy"``: see ``info_mode``
        self.context = zmq.Context()
        self.servers: list[ServerLink] = []
        self.num_servers = 1
        self.ring: Optional[Ring] = None
        self._offer: Optional[SegmentOffer] = None
        self.closed = False
        self.graceful = True
        # What recycling (``agent/recycle/spares.py``) keeps here, for shutdown to stop whatever happens:
        self.spares: dict[int, Spare] = {}  # server index -> its spare
        self.retired: list[ServerHandle] = []  # swapped-out servers still exiting
        self._generations = 0  # the last generation given out: unique over the session's servers
        self.zygotes = Zygotes(self.resources)

    def info_mode(self, backend: Backend) -> str:
        """What a server of ``backend`` does with info values msgpack cannot carry exactly: pickle
        them where its runtime is no trust boundary, else refuse them, or convert them (``lossy``)."""
        if backend.trust_boundary() is None:
            return PICKLE
        return LOSSY if self.lossy_infos else REFUSE

    def next_generation(self) -> int:
        self._generations += 1
        return self._generations

    def launch(self, specs: Sequence[EnvSpec], groups: list[list[int]], timeout: float, fork: bool = False) -> None:
        """Start every server, then wait for each one's hello (its envs exist by then). ``groups``:
        the env indices of each server (``server_groups.plan_groups``). ``fork``: servers of a
        kind two or more servers share are forked from one zygote where it can (``zygotes.py``)."""
        self.specs = list(specs)
        owners = {owner for spec in specs if (owner := spec.backend.runtime_owner()) is not None}
        if len(owners) > 1:
            raise ValueError(f"the envs' runtimes run as different users {sorted(owners)}: one portal, one user")
        self.resources.hand_over(owners.pop() if owners else None)
        self.num_servers = len(groups)
        kinds = [server_kind(specs[g[0]], specs[g[0]].to_config(), len(g)) if fork else None for g in groups]
        for index, env_indices in enumerate(groups):
            server = ServerLink(index, env_indices, specs[env_indices[0]])
            self.servers.append(server)
            shared = kinds[index] is not None and kinds.count(kinds[index]) > 1
            server.adopt(self.start_runtime(server, server.generation, fork=shared, spare=False))
        progress = StartProgress(f"{len(specs)} envs", len(self.servers), "env servers")
        try:
            for server in self.servers:
                self._handshake(server, timeout)
                progress.update()
        finally:
            progress.close()

    def _start_server(self, server: ServerLink) -> None:
        """Start the server's runtime for its current generation."""
        server.adopt(self.start_runtime(server, server.generation))

    def start_runtime(self, server: ServerLink, generation: int, fork: bool = False, spare: bool = True) -> Spare:
        """Bind a control socket (a new path per generation) and start a runtime for ``server``'s envs
        (``fork``: forked from a zygote where one can fork it, ``zygotes.py``; ``spare``: it is a
        spare for recycling, else a server the portal starts with)."""
        resources = self.resources
        channel = ControlChannel(self.context, resources.socket_address(server.index, generation), server.describe)
        try:
            resources.hand_over(resources.owner, channel.address[len("ipc://") :])
            token = secrets.token_hex(16)
            if server.spec.factory is not None:
                from .env_fns import ship_factories

                env_config = ship_factories(
                    [self.specs[i] for i in server.env_indices], resources.run_dir, server.index
                )
            else:
                env_config = server.spec.to_config()
            if server.spec.wrappers:
                from .env_fns import ship_wrappers

                env_config["wrappers"] = ship_wrappers(server.spec.wrappers, resources.run_dir)
            config = {
                "protocol": PROTOCOL_VERSION,
                "server_index": server.index,
                "num_servers": self.num_servers,  # (which share this machine: a native batch's threads)
                "env_indices": server.env_indices,
                "env": env_config,
                "control_address": channel.address,
                "lock_path": resources.lock_path,
                "run_dir": resources.run_dir,
                "ring_token": token,
                "max_message_bytes": channel.max_message,  # the cap of the agent's socket (``server/sizes.py``)
                "infos": self.info_mode(server.spec.backend),  # (``wire/info_codec.py``)
            }
            launch = ServerLaunch(
                server.index,
                server.env_indices,
                config,
                resources.run_dir,
                resources.log_path(server.index),
                generation,
            )
            handle = self.zygotes.fork(server.spec, launch, spare) if fork else None
            return Spare(generation, channel, token, launch, handle or server.spec.backend.start(launch))
        except BaseException:
            channel.close()
            raise

    def _handshake(self, server: ServerLink, timeout: float) -> None:
        server.hello = self.checked_hello(server, server.expect(HELLO, timeout, "start-up"))
        server.startup_s = time.monotonic() - server.started

    def checked_hello(self, server: ServerLink, hello: dict[str, Any], spaces: bool = True) -> dict[str, Any]:
        if hello.get("protocol") != PROTOCOL_VERSION:
            theirs = hello.get("version")
            theirs = f"portal-shm-env {theirs:.40}" if isinstance(theirs, str) else "an older portal-shm"
            raise ProtocolMismatchError(
                f"env server {server.index} ({server.runtime()}) runs {theirs}, protocol "
                f"{hello.get('protocol')!r:.40}; this agent runs portal-shm {__version__}, protocol "
                f"{PROTOCOL_VERSION}: install portal-shm-env=={__version__} in that runtime (an image: "
                "portal-shm build NAME)"
            )
        return check_hello(hello, len(server.env_indices), server.describe(), spaces)

    def restart(self, server: ServerLink, timeout: float) -> None:
        """Replace a failed server by a fresh one of the same spec, attached to the same ring.

        The old runtime is stopped first (a hung one is killed), so nothing writes its rows any
        more; its doorbells are closed and the fresh server gets new ones (no stale ring can
        reach it or come from it), and the control socket gets a new path, since
        ZeroMQ removes a closed ipc socket's file asynchronously and could remove a rebound one.
        The fresh server must describe exactly the spaces its predecessor did.
        """
        before = server.hello
        _, offer = self.attached()
        server.owed = None  # (what it owed was its predecessor's: recovery resets its envs)
        if server.handle is not None:
            server.handle.stop(timeout=1.0)
        server.channel.close()
        offer.forget(server.token)
        server.generation = self.next_generation()
        self._start_server(server)
        self._handshake(server, timeout)
        self.check_spaces(server, before, server.hello, "restarted")
        self.attach_fresh(server, timeout)

    @staticmethod
    def check_spaces(server: ServerLink, before: dict[str, Any], after: dict[str, Any], what: str) -> None:
        spaces = ("observation_spaces", "action_spaces")
        if packb([after.get(key) for key in spaces]) != packb([before.get(key) for key in spaces]):
            raise ServerProtocolError(f"the {what} {server.describe()} describes other spaces than before")

    def attach_fresh(self, server: ServerLink, timeout: float) -> None:
        """Give a fresh server (that said hello) its mailbox, new doorbells and the ring."""
        ring, _ = self.attached()
        ring.views["mailbox"][server.index][:] = 0
        self._arm(server)
        server.channel.send(self.attach_message(), server.check_alive)
        server.expect(READY, timeout, "restart")

    def release_spare(self, spare: Spare) -> None:
        """Close what a spare holds of the agent's (its channel, doorbells, an unfetched offer)."""
        spare.channel.close()
        close_all((spare.go, spare.done))
        if self._offer is not None:
            self._offer.forget(spare.token)  # (its ends, if it never fetched them)

    def attach(self, layout: dict[str, Any], settings: dict[str, Any], timeout: float) -> Ring:
        """Create the ring and doorbells, hand them to every server and wait until all are ready."""
        self.ring = Ring.create(self.resources.tag, layout)
        self._layout, self._settings = layout, settings
        assert self.ring.fd is not None  # a ring just created holds its segment's descriptor
        self._offer = SegmentOffer(self.resources.segment_socket, self.ring.fd)
        self.resources.hand_over(self.resources.owner, self._offer.path)
        for server in self.servers:
            self._arm(server)
            server.channel.send(self.attach_message(), server.check_alive)
        for server in self.servers:
            server.expect(READY, timeout, "start-up")
        return self.ring

    def offer(self) -> SegmentOffer:
        """The socket that handed the servers the ring: it hands them descriptors made later too (a
        recorded env's frame ring, ``VectorPortal.record_frames_shared``), each under a token of its own."""
        _, offer = self.attached()
        return offer

    def attached(self) -> tuple[Ring, SegmentOffer]:
        """The ring and its offer, for what only runs once ``attach`` created them."""
        assert self.ring is not None and self._offer is not None, "the ring is not attached yet"
        return self.ring, self._offer

    def _arm(self, server: ServerLink) -> None:
        """New doorbell pipes for ``server``: the agent keeps one end of each, the server fetches
        the others with the ring (and the agent's copies of those close once handed over)."""
        self.take_row(server, *self.new_doorbells(server.token))

    def new_doorbells(self, token: str) -> tuple[Bell, Waiter]:
        """Two new doorbell pipes: the agent's ends, the server's offered to whoever presents ``token``."""
        _, offer = self.attached()
        go_read, go_write = bell_pipe()
        done_read, done_write = bell_pipe()
        offer.expect(token, [go_read, done_write])
        return Bell(go_write), Waiter(done_read)

    def take_row(self, server: ServerLink, go: Bell, done: Waiter) -> None:
        """Make ``go`` and ``done`` the server's doorbells (closing those it had) and bind its mailbox row."""
        ring, _ = self.attached()
        _, old_go, old_done = server.started_ends()  # none yet when the server is armed the first time
        close_all((old_go, old_done))
        server.go, server.done = go, done
        server.mailbox = memoryview(ring.views["mailbox"][server.index])
        server.seq = server.mailbox[SEQ]
        server.controls = 0

    def attach_message(self) -> dict[str, Any]:
        _, offer = self.attached()
        return {"cmd": ATTACH, "segment": offer.path, "layout": self._layout, **self._settings}

    def shutdown(self, timeout: float = 5.0) -> None:
        """Ask servers to close their envs (unless the portal broke), then make sure they are gone."""
        if self.closed:
            return
        self.closed = True
        try:
            if self.graceful and self.ring is not None:
                for server in self.servers:
                    if server.handle is None or server.handle.exit_status() is not None:
                        continue
                    server.owed = None  # (it answers, then reads the CLOSE: nobody reads that answer)
                    try:
                        server.channel.send({"cmd": CLOSE}, server.check_alive, timeout=1.0)
                        server.post_control()
                    except Exception:
                        pass
                self.resources.remove_dir()
                deadline = time.monotonic() + timeout
                for server in self.servers:
                    while server.handle is not None and server.handle.exit_status() is None:
                        if time.monotonic() > deadline:
                            break
                        time.sleep(0.005)
            for server in self.servers:
                if server.handle is not None:
                    server.handle.stop(timeout=1.0)
            for handle in [spare.handle for spare in self.spares.values()] + self.retired:
                handle.stop(timeout=1.0)
            self.zygotes.close()  # after the servers it forked: their stops may go through it
        finally:
            for spare in self.spares.values():
                self.release_spare(spare)
            for server in self.servers:
                close_all(server.started_ends())  # a failed start-up leaves servers without some
            if self._offer is not None:
                self._offer.close()
            if self.ring is not None:
                self.ring.close()
            self.context.term()
            self.resources.release()
