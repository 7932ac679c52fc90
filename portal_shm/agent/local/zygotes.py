"""Servers forked from zygotes: fresh env servers at a few milliseconds of CPU, sharing pages.

A server started as a fresh runtime costs an interpreter, its imports and the making of its envs
(Pong: ~0.65 CPU-s, about one random-action episode) and holds all of that in memory of its own:
64 servers of one env each took 15 s to start and 1.5 GiB here, where AsyncVectorEnv's forked
workers took 0.5 s and 0.3 GiB. A zygote (``server/zygote.py``) is one runtime per kind of server
(backend, env config, envs per server), started through the server's own backend, that makes the
envs once and forks servers from them: at start-up where a portal starts two or more servers of
a kind (``server_start="fork"``, the default), and as spares for recycling.

Only backends whose servers are processes of this machine fork (``Backend.forks_servers``: process,
venv, micromamba). A docker container or a Ray actor is one server, so each starts fresh: a zygote
inside a container would serve one server only. Where code the agent ships makes the envs
(factories, wrappers), the zygote made one server's envs to import what they need and closed them:
its forks share the imports and make their own envs from their own code. Forks asked for while the zygote makes its envs wait for it
(a zygote costs what one fresh start does). A zygote whose envs started threads or processes
closes them and forks servers that make their own once those ended; one where something still runs
says so, and its servers start fresh from then on (warned once, naming the option that starts them
so without trying).
"""

from __future__ import annotations

import hashlib
import os
import select
import signal
import socket
import time
import warnings
from typing import Any, Callable, Optional

from ...errors import PortalError
from ...runtimes.backend import ServerHandle, ServerLaunch
from ...runtimes.config_file import remove_config, write_launch_config
from ...runtimes.resources import PortalResources
from ...wire.launch import read_tail
from ...wire.protocol import ProtocolError, packb
from ...wire.zygote_frames import EXITED, FORK, FORKED, READY, SIGNAL, send_frame, take_frames
from .spec import EnvSpec

STARTING, READY_STATE, UNFORKABLE, GONE = "starting", "ready", "unforkable", "gone"
STARTUP_S = 120.0  # a zygote not ready by then is given up on: its spares start fresh


def _readable(fds: list[int], timeout: float) -> bool:
    """Whether one of ``fds`` is readable within ``timeout`` seconds. ``poll``, not ``select``: a
    portal of hundreds of servers holds descriptors above select's limit of 1024."""
    poller = select.poll()
    for fd in fds:
        poller.register(fd, select.POLLIN)
    return bool(poller.poll(int(timeout * 1000)))


class ForkedHandle(ServerHandle):
    """An env server a zygote forked: its pid and exit status come from the zygote's frames.

    Asked for while its zygote still makes its envs, the fork waits for it (a second runtime
    starting beside the zygote would only slow both down); should the zygote turn out unable to
    fork, the handle starts a fresh runtime instead (``fallback``) and stands for that one.
    """

    def __init__(
        self, zygote: "ZygoteLink", request: int, launch: ServerLaunch, fallback: Callable[[], ServerHandle]
    ) -> None:
        self.zygote = zygote
        self.request = request
        self.launch = launch
        self.log_path = launch.log_path
        self.fallback = fallback
        self.fresh: Optional[ServerHandle] = None  # the runtime started instead of a fork
        self.pid: Optional[int] = None
        self.pidfd: Optional[int] = None
        self.status: Optional[str] = None

    def start_fresh(self) -> None:
        try:
            self.fresh = self.fallback()
        except Exception as exc:  # as a failed start-up of the spare: it is retried later
            self.ended(f"its zygote could not fork it and a fresh start failed: {exc}"[:300])

    def forked(self, pid: int) -> None:
        self.pid = pid
        try:
            self.pidfd = os.pidfd_open(pid)  # signals and exit checks that survive the zygote
        except (AttributeError, OSError):
            self.pidfd = None

    def ended(self, status: str) -> None:
        if self.status is None:
            self.status = status
        if self.pidfd is not None:
            os.close(self.pidfd)
            self.pidfd = None

    def exit_status(self) -> Optional[str]:
        if self.fresh is not None:
            return self.fresh.exit_status()
        if self.status is None:
            self.zygote.pump()
            if self.fresh is not None:
                return self.fresh.exit_status()
        if self.status is None and self.zygote.state == GONE:
            self._orphan_check()
        return self.status

    def _orphan_check(self) -> None:
        """With its zygote gone nobody reports its exit: look at the process itself."""
        if self.pid is None:
            self.ended(f"never forked: its zygote ended first ({self.zygote.why})")
        elif self.pidfd is not None:
            if _readable([self.pidfd], 0.0):
                self.ended("exited (its zygote ended first, so its exit status is unknown)")
        elif not os.path.exists(f"/proc/{self.pid}"):
            self.ended("exited (its zygote ended first, so its exit status is unknown)")

    def _signal(self, number: int) -> None:
        if self.pid is None or self.status is not None:
            return
        if self.zygote.state != GONE and self.zygote.send({"cmd": SIGNAL, "pid": self.pid, "signal": int(number)}):
            return
        try:
            if self.pidfd is not None:
                signal.pidfd_send_signal(self.pidfd, number)
            else:
                os.kill(self.pid, number)
        except (ProcessLookupError, OSError):
            pass

    def _wait(self, seconds: float) -> bool:
        deadline = time.monotonic() + seconds
        while self.exit_status() is None:
            if time.monotonic() >= deadline:
                return False
            self.zygote.pump(min(0.01, max(deadline - time.monotonic(), 0)))
        return True

    def stop(self, timeout: float) -> None:
        if self.fresh is not None:
            self.fresh.stop(timeout)
            return
        if self in self.zygote.waiting:
            self.zygote.waiting.remove(self)
            self.ended("stopped before its zygote could fork it")
            return
        if self.exit_status() is not None:
            return
        if self.pid is None:
            self._wait(1.0)  # the fork answer is milliseconds away
        self._signal(signal.SIGTERM)
        if not self._wait(timeout):
            self._signal(signal.SIGKILL)
            self._wait(2.0)

    def log_tail(self, lines: int = 30) -> str:
        return self.fresh.log_tail(lines) if self.fresh is not None else read_tail(self.log_path, lines)

    def describe(self) -> str:
        if self.fresh is not None:
            return self.fresh.describe()
        pid = "?" if self.pid is None else self.pid
        return f"process pid {pid} forked from a zygote ({self.zygote.handle.describe()})"

    def host_pid(self) -> Optional[int]:
        if self.fresh is not None:
            return self.fresh.host_pid()
        if self.pid is None and self.status is None:
            self._wait_for_pid(1.0)
        return self.pid

    def _wait_for_pid(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while self.pid is None and self.exit_status() is None and time.monotonic() < deadline:
            self.zygote.pump(0.01)


class ZygoteLink:
    """The agent's end of one zygote: its runtime, its socket and the servers it forked."""

    def __init__(self, handle: ServerHandle, path: str, label: str) -> None:
        self.handle = handle
        self.path = path
        self.label = label
        self.sock: Optional[socket.socket] = None
        self.buffer = bytearray()
        self.started = time.monotonic()
        self.state = STARTING
        self.why = ""
        self.requests = 0
        self.forks: dict[int, ForkedHandle] = {}  # request -> its server, until it exits
        self.waiting: list[ForkedHandle] = []  # asked for before the zygote was ready
        self.refused: Callable[[str], None] = lambda why: None  # told why, once forks waited in vain

    def _connect(self) -> None:
        status = self.handle.exit_status()
        if status is not None:
            self._gone(f"the zygote ended at start-up ({status}): {self.handle.log_tail(5)[-400:]}")
            return
        if time.monotonic() - self.started > STARTUP_S:
            self.handle.stop(timeout=1.0)
            self._gone(f"the zygote did not listen within {STARTUP_S:.0f} s")
            return
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(self.path)
        except OSError:
            sock.close()  # not listening yet
            return
        sock.settimeout(2.0)
        self.sock = sock

    def pump(self, wait: float = 0.0) -> None:
        """Read what the zygote sent (waiting up to ``wait`` seconds for something)."""
        if self.state == GONE:
            return
        if self.sock is None:
            self._connect()
            if self.sock is None:
                return
        while _readable([self.sock.fileno()], wait):
            wait = 0.0
            try:
                data = self.sock.recv(1 << 16)
            except OSError:
                data = b""
            if not data:
                self._gone(f"its zygote closed its socket ({self.handle.exit_status() or 'still running'})")
                return
            self.buffer += data
            try:
                messages = take_frames(self.buffer)
            except ProtocolError as exc:
                self._gone(f"its zygote sent a bad frame: {exc}")
                return
            for message in messages:
                self._dispatch(message)

    def _dispatch(self, message: dict[str, Any]) -> None:
        cmd = message.get("cmd")
        if cmd == READY and self.state == STARTING:
            forkable, why = message.get("forkable"), message.get("why")
            self.state = READY_STATE if forkable is True else UNFORKABLE
            self.why = str(why)[:300] if isinstance(why, str) else ""
            self._release_waiting()
            return
        request, pid = message.get("id"), message.get("pid")
        handle = self.forks.get(request) if isinstance(request, int) else None
        if handle is None:
            return  # a frame about nothing the agent asked for: ignored
        if cmd == FORKED and isinstance(pid, int) and pid > 1 and handle.pid is None:
            handle.forked(pid)
        elif cmd == EXITED:
            status = message.get("status")
            handle.ended(str(status)[:200] if isinstance(status, str) else "exited")
            del self.forks[handle.request]

    def _release_waiting(self) -> None:
        """Fork the servers asked for while the zygote warmed up (or start them fresh)."""
        waiting, self.waiting = self.waiting, []
        if waiting and self.state != READY_STATE:
            self.refused(self.why or "its zygote ended")
        for handle in waiting:
            if self.state != READY_STATE or not self._request(handle):
                handle.start_fresh()

    def _request(self, handle: ForkedHandle) -> bool:
        """Ask for a fork; its config goes as a private file, as to every server (``config_file.py``),
        which the forked server reads and removes: frames stay small whatever the env kwargs."""
        self.forks[handle.request] = handle
        launch = handle.launch
        config = write_launch_config(launch)
        if self.send({"cmd": FORK, "id": handle.request, "config_file": config, "log_path": launch.log_path}):
            return True
        remove_config(config)
        del self.forks[handle.request]
        return False

    def _gone(self, why: str) -> None:
        self.state, self.why = GONE, why
        if self.sock is not None:
            self.sock.close()
            self.sock = None
        self._release_waiting()

    def send(self, message: dict[str, Any]) -> bool:
        if self.sock is None:
            return False
        try:
            send_frame(self.sock, message)
            return True
        except OSError as exc:
            self._gone(f"its socket failed: {exc}")
            return False

    def fork(self, launch: ServerLaunch, fallback: Callable[[], ServerHandle]) -> Optional[ForkedHandle]:
        """A server forked with ``launch``'s config (once the zygote is ready, if it is warming
        up), or None where the zygote cannot fork."""
        self.pump()
        if self.state not in (STARTING, READY_STATE):
            return None
        self.requests += 1
        handle = ForkedHandle(self, self.requests, launch, fallback)
        if self.state == STARTING:
            self.waiting.append(handle)
            return handle
        return handle if self._request(handle) else None

    def close(self) -> None:
        """Close the socket (the zygote exits on it) and make sure its runtime is gone."""
        for handle in self.waiting:
            handle.ended("its zygote closed before forking it")
        self.waiting = []
        self._gone("closed")
        self.handle.stop(timeout=1.0)


def ships_code(spec: EnvSpec) -> bool:
    """Its envs are made by code the agent ships (factories, wrappers): each fork makes its own."""
    return spec.factory is not None or bool(spec.wrappers)


def server_kind(spec: EnvSpec, env_config: dict[str, Any], envs: int) -> Optional[str]:
    """The kind of a server of ``spec`` with ``env_config`` and ``envs`` envs, which one zygote
    forks; None where none can (a backend that does not fork). Servers whose envs shipped code
    makes share one zygote per backend: it made one server's envs to import what they need, then
    closed them, and each fork makes its own from its own code (a factory may differ per env)."""
    if not spec.backend.forks_servers():
        return None
    if ships_code(spec):
        return repr((spec.backend.key(), "each fork makes its envs"))
    env = hashlib.sha256(packb(env_config)).hexdigest()  # (kwargs may be megabytes)
    return repr((spec.backend.key(), env, envs))


class Zygotes:
    """A session's zygotes, one per kind of server (``server_kind``)."""

    def __init__(self, resources: PortalResources) -> None:
        self.resources = resources
        self.links: dict[str, ZygoteLink] = {}
        self.failed: dict[str, str] = {}  # kinds whose zygote could not start: not tried again
        self.warned: set[str] = set()

    def fork(self, spec: EnvSpec, launch: ServerLaunch, spare: bool = True) -> Optional[ServerHandle]:
        """A forked server for ``launch`` (a spare of a server of ``spec``, or with ``spare=False``
        one a portal starts with), or None: then the caller starts a fresh runtime (no zygote for
        this kind of server, or one that cannot fork)."""
        key = server_kind(spec, launch.config["env"], len(launch.env_indices))
        if key is None or key in self.failed:
            return None
        if spare:
            what, instead = f"spares of env server {launch.server_index}", "recycle={..., 'spare': 'start'}"
        else:
            what, instead = f"the env servers of {spec.id} ({spec.backend.name})", "server_start='fresh'"

        def warn(why: str) -> None:
            if key not in self.warned:
                self.warned.add(key)
                warnings.warn(
                    f"{what} start as fresh runtimes, not forks: {why}; {instead} starts them so without trying",
                    RuntimeWarning,
                    stacklevel=7,
                )

        link = self.links.get(key)
        if link is None:
            try:
                link = self.links[key] = self._start(spec, launch)
            except (PortalError, OSError) as exc:
                self.failed[key] = str(exc)
                warn(f"its zygote failed to start: {str(exc).splitlines()[0][:300]}")
                return None
            link.refused = warn
        handle = link.fork(launch, lambda: spec.backend.start(launch))
        if handle is None and link.state in (UNFORKABLE, GONE):
            warn(link.why or "its zygote ended")
        return handle

    def _start(self, spec: EnvSpec, launch: ServerLaunch) -> ZygoteLink:
        number = len(self.links)
        path = os.path.join(self.resources.run_dir, f"zygote-{number}.sock")
        config = {
            key: launch.config[key]
            for key in ("protocol", "server_index", "env_indices", "env", "lock_path", "run_dir")
        }
        config["zygote_socket"] = path
        config["zygote_envs"] = "imports" if ships_code(spec) else "copies"
        zygote_launch = ServerLaunch(
            launch.server_index,
            launch.env_indices,
            config,
            launch.run_dir,
            os.path.join(self.resources.run_dir, f"zygote-{number}.log"),
            launch.generation,
        )
        return ZygoteLink(spec.backend.start_zygote(zygote_launch), path, spec.backend.name)

    def close(self) -> None:
        for link in self.links.values():
            link.close()
        self.links.clear()
