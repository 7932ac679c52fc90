"""The agent's side of a portal's env servers: launching, handshakes and orderly shutdown.

A ``PortalSession`` owns everything a portal holds outside Python's heap (processes or
containers, sockets, the ring, the run directory) and releases it exactly once,
whether through ``close()``, garbage collection, interpreter exit or a failed start-up.
"""

from __future__ import annotations

import math
import os
import secrets
import time
from typing import Optional, Sequence

import zmq

from ..errors import (
    EnvError,
    EnvNotFoundError,
    ProtocolMismatchError,
    ServerDiedError,
    ServerProtocolError,
    env_error_class,
)
from ..runtimes.backend import ServerHandle, ServerLaunch
from ..runtimes.resources import PortalResources
from ..wire import protocol as P
from ..wire.doorbell import Bell, Waiter, bell_pipe, close_all
from ..wire.handoff import SegmentOffer
from ..wire.layout import CMD, SEQ, SLOT, STATUS, STATUS_PENDING
from ..wire.ring import Ring
from .control import ControlChannel
from .spec import EnvSpec
from .validate import check_error, check_hello


class ServerLink:
    """The agent's view of one env server: its envs, channel, doorbells and backend handle."""

    def __init__(self, index: int, env_indices: list, spec: EnvSpec) -> None:
        self.index = index
        self.env_indices = env_indices
        self.spec = spec
        self.handle: Optional[ServerHandle] = None
        self.channel: Optional[ControlChannel] = None
        self.go: Optional[Bell] = None
        self.done: Optional[Waiter] = None
        self.token = ""  # what it presents to fetch the ring and its doorbell ends (``handoff``)
        self.hello: dict = {}
        self.launch: Optional[ServerLaunch] = None
        self.generation = 0
        self.mailbox: Optional[memoryview] = None  # its row of the ring's mailboxes, once attached
        self.seq = 0  # commands posted to the current server

    def post(self, cmd: int, slot: int = 0, pending: bool = False) -> None:
        """Post ``cmd`` in the server's mailbox and ring it awake; ``pending`` first marks its
        status PENDING, which the server overwrites once its results are in the ring.

        ``seq`` goes last: a server spinning on it sees the command's other words (x86 stores
        are seen in program order; elsewhere the agent does not ask servers to spin).
        """
        box = self.mailbox
        box[CMD] = cmd
        box[SLOT] = slot
        if pending:
            box[STATUS] = STATUS_PENDING
        self.seq += 1
        box[SEQ] = self.seq
        self.go.ring()

    def describe(self) -> str:
        """'env server 1 (envs [2, 3]) [runtime: ...]': what every error about this server names."""
        runtime = self.handle.describe() if self.handle is not None else "not started"
        return f"env server {self.index} (envs {self.env_indices}) [runtime: {runtime}]"

    def check_alive(self) -> None:
        status = self.handle.exit_status() if self.handle is not None else None
        if status is not None:
            raise ServerDiedError(self.index, self.env_indices, status, self.handle.log_tail(), self.handle.describe())

    def error(self, message: dict) -> EnvError:
        """The agent-side exception for an ERROR message this server sent (fields validated)."""
        env_index, phase, error_type, text, remote_traceback = check_error(message, self.env_indices)
        cls = EnvNotFoundError if error_type.endswith("EnvNotFound") else env_error_class(error_type)
        return cls(env_index, phase, error_type, text, remote_traceback, self.handle.describe())

    def recv(self, timeout: Optional[float], what: str) -> dict:
        """One message from this server; dead or silent servers raise, naming envs and runtime."""
        return self.channel.recv(self.check_alive, timeout, f"{what} of {self.describe()}")

    def errors(self, message: dict) -> list[EnvError]:
        """All env errors of one ERROR message: the first env's, then those of the server's other envs."""
        more = message.get("more")
        return [self.error(message)] + [
            self.error(m) for m in (more if isinstance(more, list) else []) if isinstance(m, dict)
        ]

    def expect(self, cmd: str, timeout: Optional[float], what: str) -> dict:
        message = self.recv(timeout, what)
        if message["cmd"] == P.ERROR:
            raise self.error(message)
        if message["cmd"] != cmd:
            raise ServerProtocolError(
                f"env server {self.index} sent {message['cmd']!r} during {what}, expected {cmd!r}"
            )
        return message

    def schemas(self, key: str) -> list:
        return self.hello[key]


def group_envs(specs: Sequence[EnvSpec], envs_per_server: Optional[int]) -> list[list[int]]:
    """Consecutive envs with equal specs share a server; by default one server per CPU core."""
    if envs_per_server is None:
        envs_per_server = math.ceil(len(specs) / min(len(specs), os.cpu_count() or 1))
    limits = [spec.backend.max_envs_per_server() or envs_per_server for spec in specs]
    groups: list[list[int]] = []
    for i, spec in enumerate(specs):
        if (
            groups
            and spec.shares_server_with(specs[groups[-1][0]])
            and len(groups[-1]) < min(envs_per_server, limits[i])
        ):
            groups[-1].append(i)
        else:
            groups.append([i])
    return groups


class PortalSession:
    """Servers and shared resources of one portal."""

    def __init__(self, base_dir: Optional[str] = None) -> None:
        self.resources = PortalResources(base_dir)
        self.context = zmq.Context()
        self.servers: list[ServerLink] = []
        self.ring: Optional[Ring] = None
        self._offer: Optional[SegmentOffer] = None
        self.closed = False
        self.graceful = True

    def launch(self, specs: Sequence[EnvSpec], envs_per_server: Optional[int], timeout: float) -> None:
        """Start every server, then wait for each one's hello (its envs exist by then)."""
        self.specs = list(specs)
        owners = {spec.backend.runtime_owner() for spec in specs} - {None}
        if len(owners) > 1:
            raise ValueError(f"the envs' runtimes run as different users {sorted(owners)}: one portal, one user")
        self.resources.hand_over(owners.pop() if owners else None)
        for index, env_indices in enumerate(group_envs(specs, envs_per_server)):
            server = ServerLink(index, env_indices, specs[env_indices[0]])
            self.servers.append(server)
            self._start_server(server)
        for server in self.servers:
            self._handshake(server, timeout)

    def _start_server(self, server: ServerLink) -> None:
        """Bind the server's control socket (a new path per generation) and start its runtime."""
        resources = self.resources
        server.channel = ControlChannel(
            self.context, resources.socket_address(server.index, server.generation), server.describe
        )
        resources.hand_over(resources.owner, server.channel.address[len("ipc://") :])
        server.token = secrets.token_hex(16)
        if server.spec.factory is not None:
            from .env_fns import ship_factories

            env_config = ship_factories([self.specs[i] for i in server.env_indices], resources.run_dir, server.index)
        else:
            env_config = server.spec.to_config()
        config = {
            "protocol": P.PROTOCOL_VERSION,
            "server_index": server.index,
            "env_indices": server.env_indices,
            "env": env_config,
            "control_address": server.channel.address,
            "lock_path": resources.lock_path,
            "run_dir": resources.run_dir,
            "ring_token": server.token,
        }
        server.launch = ServerLaunch(
            server.index, server.env_indices, config, resources.run_dir, resources.log_path(server.index)
        )
        server.handle = server.spec.backend.start(server.launch)

    def _handshake(self, server: ServerLink, timeout: float) -> None:
        hello = server.expect(P.HELLO, timeout, "start-up")
        if hello.get("protocol") != P.PROTOCOL_VERSION:
            raise ProtocolMismatchError(
                f"env server {server.index} speaks portal-shm protocol {hello.get('protocol')!r:.40}, "
                f"the agent speaks {P.PROTOCOL_VERSION}: install the same portal-shm version in the "
                f"env runtime ({server.handle.describe()})"
            )
        server.hello = check_hello(hello, len(server.env_indices), server.describe())

    def restart(self, server: ServerLink, timeout: float) -> None:
        """Replace a failed server by a fresh one of the same spec, attached to the same ring.

        The old runtime is stopped first (a hung one is killed), so nothing writes its rows any
        more; its doorbells are closed and the fresh server gets new ones (no stale ring can
        reach it or come from it), and the control socket gets a new path, since
        ZeroMQ removes a closed ipc socket's file asynchronously and could remove a rebound one.
        The fresh server must describe exactly the spaces its predecessor did.
        """
        before = (server.hello["observation_spaces"], server.hello["action_spaces"])
        if server.handle is not None:
            server.handle.stop(timeout=1.0)
        server.channel.close()
        server.generation += 1
        self._offer.forget(server.token)
        mailbox = self.ring.views["mailbox"][server.index]
        mailbox[:] = 0
        self._start_server(server)
        self._handshake(server, timeout)
        after = (server.hello["observation_spaces"], server.hello["action_spaces"])
        if P.packb(after) != P.packb(before):
            raise ServerProtocolError(f"the restarted {server.describe()} describes other spaces than before")
        self._arm(server)
        server.channel.send(self._attach_message(), server.check_alive)
        server.expect(P.READY, timeout, "restart")

    def attach(self, layout: dict, settings: dict, timeout: float) -> Ring:
        """Create the ring and doorbells, hand them to every server and wait until all are ready."""
        self.ring = Ring.create(self.resources.tag, layout)
        self._layout, self._settings = layout, settings
        self._offer = SegmentOffer(self.resources.segment_socket, self.ring.fd)
        self.resources.hand_over(self.resources.owner, self._offer.path)
        for server in self.servers:
            self._arm(server)
            server.channel.send(self._attach_message(), server.check_alive)
        for server in self.servers:
            server.expect(P.READY, timeout, "start-up")
        return self.ring

    def _arm(self, server: ServerLink) -> None:
        """New doorbell pipes for ``server``: the agent keeps one end of each, the server fetches
        the others with the ring (and the agent's copies of those close once handed over)."""
        close_all((server.go, server.done))
        go_read, go_write = bell_pipe()
        done_read, done_write = bell_pipe()
        server.go, server.done = Bell(go_write), Waiter(done_read)
        server.mailbox = memoryview(self.ring.views["mailbox"][server.index])
        server.seq = server.mailbox[SEQ]
        self._offer.expect(server.token, [go_read, done_write])

    def _attach_message(self) -> dict:
        return {"cmd": P.ATTACH, "segment": self._offer.path, "layout": self._layout, **self._settings}

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
                    try:
                        server.channel.send({"cmd": P.CLOSE}, server.check_alive, timeout=1.0)
                        server.post(P.CMD_CONTROL)
                    except Exception:
                        pass
                deadline = time.monotonic() + timeout
                for server in self.servers:
                    while server.handle is not None and server.handle.exit_status() is None:
                        if time.monotonic() > deadline:
                            break
                        time.sleep(0.005)
            for server in self.servers:
                if server.handle is not None:
                    server.handle.stop(timeout=1.0)
        finally:
            for server in self.servers:
                if server.channel is not None:
                    server.channel.close()
                close_all((server.go, server.done))
            if self._offer is not None:
                self._offer.close()
            if self.ring is not None:
                self.ring.close()
            self.context.term()
            self.resources.release()
