"""Attaching to env servers that are already running (``portal-shm start``), by address.

Each listener address (``ipc://DIR/NAME.sock``) hosts workers on demand. The portal's run
directory is created inside ``DIR``, which ``portal-shm start`` mounts into its containers, so
the workers reach the agent's sockets and lock file there.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Optional, Union

import zmq

from ..errors import PortalError
from ..wire.protocol import packb, unpackb
from .backend import Backend, ServerHandle, ServerLaunch
from .config_file import packed_config

REQUEST_TIMEOUT_MS = 5000


class ListenerClient:
    """A REQ socket to one listener that survives timeouts (REQ gets stuck after a lost reply)."""

    def __init__(self, address: str) -> None:
        self.address = address
        self.context = zmq.Context.instance()
        self.socket: Optional[zmq.Socket] = None

    def request(self, message: dict, timeout_ms: int = REQUEST_TIMEOUT_MS) -> dict:
        if self.socket is None:
            self.socket = self.context.socket(zmq.REQ)
            self.socket.setsockopt(zmq.LINGER, 0)
            self.socket.connect(self.address)
        self.socket.send(packb(message))
        if not self.socket.poll(timeout_ms):
            self.socket.close(0)
            self.socket = None
            raise PortalError(f"no env-server listener answers at {self.address} (is `portal-shm start` running?)")
        reply = unpackb(self.socket.recv())
        if not isinstance(reply, dict) or not reply.get("ok"):
            raise PortalError(f"listener {self.address} refused {message.get('cmd')!r}: {reply.get('error')}")
        return reply

    def close(self) -> None:
        if self.socket is not None:
            self.socket.close(0)
            self.socket = None


class AttachedHandle(ServerHandle):
    def __init__(self, client: ListenerClient, worker: str, pid: int) -> None:
        self.client = client
        self.worker = worker
        self.pid = pid
        self._status: Optional[str] = None
        self._log = ""

    def exit_status(self) -> Optional[str]:
        if self._status is None:
            try:
                reply = self.client.request({"cmd": "status", "worker": self.worker})
            except PortalError as exc:
                self._status = str(exc)
                return self._status
            if reply.get("exit") is not None:
                code = reply["exit"]
                self._status = f"exit code {code}" if isinstance(code, int) and code >= 0 else f"status {code}"
                self._log = str(reply.get("log", ""))
        return self._status

    def log_tail(self, lines: int = 30) -> str:
        return "\n".join(self._log.splitlines()[-lines:])

    def stop(self, timeout: float) -> None:
        try:
            self.client.request({"cmd": "stop", "worker": self.worker, "timeout": timeout})
        except PortalError:
            pass
        self.client.close()

    def describe(self) -> str:
        return f"worker {self.worker} (pid {self.pid} in its runtime) of listener {self.client.address}"


@dataclass(frozen=True)
class AttachBackend(Backend):
    """Servers from running listeners; several addresses share the servers round-robin."""

    address: Union[str, tuple] = ()
    name = "attach"

    def __post_init__(self) -> None:
        addresses = (self.address,) if isinstance(self.address, str) else tuple(self.address)
        if not addresses or not all(a.startswith("ipc://") for a in addresses):
            raise PortalError(f"attach needs listener addresses ipc://PATH (see portal-shm ps), got {self.address!r}")
        object.__setattr__(self, "address", addresses)

    def trust_boundary(self) -> Optional[str]:
        return "listener"  # (its runtime is whatever started the listener: a container, another user)

    def run_dir_base(self) -> Optional[str]:
        return os.path.dirname(self.address[0][len("ipc://") :])

    def start(self, launch: ServerLaunch) -> ServerHandle:
        packed_config(launch.config, launch.server_index)  # (refused here, by size, before it travels)
        client = ListenerClient(self.address[launch.server_index % len(self.address)])
        reply = client.request({"cmd": "start", "config": launch.config})
        return AttachedHandle(client, reply["worker"], int(reply.get("pid", 0)))
