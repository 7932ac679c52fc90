"""A zygote: a runtime that made one server's envs once and forks fresh env servers from them.

Starting a spare runtime costs its interpreter, its imports and the making of its envs: for Pong
about 0.65 CPU-s, of which 0.2 is the env alone, nearly the CPU of a whole random-action episode.
A server forked from a zygote shares the zygote's memory copy-on-write and its envs are copies of
envs that were made and never stepped, so it is as fresh as a new process (nothing a stepped env
leaked or slowed down is in it) for a few milliseconds of CPU. The zygote itself never steps,
resets or renders its envs; it only forks. Where code the agent ships makes the envs (factories,
wrappers: ``zygote_envs="imports"``), one factory may differ from the next, so the zygote makes one
server's envs only to import what they need and closes them; each fork makes its own.

Forking copies one thread. A zygote whose envs started threads of their own (Python threads,
or native ones beyond those its imports started: a game engine's, ALE's vector env's pool) or
child processes closes them and, once those have ended, forks servers that make their own envs
(``imports_only``); where something still runs, it reports itself not forkable, and the agent then
starts those servers as fresh runtimes. Each forked server redirects its output to its own log,
reseeds Python's and numpy's global generators (as a new process would draw them) and serves
exactly as ``startup.run`` does, with the copied envs.

The agent speaks to the zygote over one Unix socket in its private run directory (the peer must
be the zygote's own user) in the frames of ``wire/zygote_frames.py``; each fork's config comes as
a file beside it, as every server's does (``wire/launch.py``). The zygote exits when the
agent closes the socket or dies; the servers it forked live on, each watching the agent itself.
"""

from __future__ import annotations

import os
import random
import select
import signal
import socket
import struct
import sys
import threading
import time
import traceback
from typing import Any, Callable, Optional, Union

from ..wire.launch import decode_config
from ..wire.protocol import ProtocolError
from ..wire.zygote_frames import EXITED, FORK, FORKED, READY, SIGNAL, send_frame, take_frames
from .errors import close_envs
from .state import warm

POLL_SECONDS = 0.5
SETTLE_TURNS, SETTLE_SECONDS = 20, 0.05  # how long closed envs' threads get to end


def _native_threads() -> int:
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return 1


def _child_processes() -> int:
    count = 0
    try:
        for task in os.listdir("/proc/self/task"):
            with open(f"/proc/self/task/{task}/children") as handle:
                count += len(handle.read().split())
    except OSError:
        pass
    return count


def fork_blockers(threads_before: int) -> str:
    """Why forking these envs would be unsafe ("" when it is safe): what they started."""
    reasons = []
    python_threads = threading.active_count() - 1
    if python_threads > 0:
        reasons.append(f"{python_threads} Python thread(s)")
    extra = _native_threads() - threads_before - python_threads
    if extra > 0:
        reasons.append(f"{extra} native thread(s)")
    children = _child_processes()
    if children:
        reasons.append(f"{children} child process(es)")
    return ", ".join(reasons)


def redraw_generators(envs: list) -> None:
    """Give each copied env generators of its own, drawn from the OS as a new process draws them.

    The envs were made once, in the zygote: a generator one drew as it was made (a gymnasium env
    that read ``np_random`` in its constructor; ALE seeds its emulator there) is every sibling's
    too, and unseeded resets would show it (eight forks, one random walk). A gymnasium env's
    generator is replaced by a fresh one where it was drawn (one not drawn yet is drawn at first
    use, from the OS, as in any process); an env that seeds an engine of its own from it as it is
    made (``seed_game``: ALE) does that again. The env is not reset and sees no seed: an unseeded
    first reset stays unseeded.
    """
    import numpy

    for env in envs:
        inner = getattr(env, "unwrapped", env)
        if callable(getattr(inner, "seed_game", None)):
            inner.seed_game()  # (ALE, as its constructor does: a fresh generator, the emulator's seed...
            if callable(getattr(inner, "load_game", None)):
                inner.load_game()  # ... which takes effect as the game is loaded)
        elif getattr(inner, "_np_random", None) is not None:  # (drawn already: gymnasium's Env keeps it there)
            inner.np_random = numpy.random.Generator(numpy.random.PCG64(numpy.random.SeedSequence()))


def imports_only(envs: list, env_indices: list, threads_before: int) -> str:
    """Close the zygote's envs, keeping what they imported: each fork makes its own envs.

    For envs the agent's code makes (``zygote_envs="imports"``: one factory may differ from the
    next), and for envs whose making started threads or processes: a simulator's thread pool
    (ALE's vector env) makes its process unsafe to fork, but it ends as its envs close. Each fork
    then makes its own envs (and their threads) after the fork. Where something still runs once
    they closed (a thread started at import, a pool kept for the process's life), the servers start
    fresh: returns what still runs ("" when nothing does).
    """
    import gc

    close_envs(envs, env_indices)
    gc.collect()  # (a pool may end only with the last reference to it)
    for _ in range(SETTLE_TURNS):
        blockers = fork_blockers(threads_before)
        if not blockers:
            return ""
        time.sleep(SETTLE_SECONDS)
    return blockers


def _drained(fd: int) -> bool:
    """Read what the wake-up pipe holds; False once it is empty."""
    try:
        return bool(os.read(fd, 512))
    except BlockingIOError:
        return False


def describe_status(status: int) -> str:
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        try:
            name = signal.Signals(number).name
        except ValueError:
            name = f"signal {number}"
        return f"killed by {name} (exit status {-number})"
    return f"exit code {os.WEXITSTATUS(status) if os.WIFEXITED(status) else status}"


class Zygote:
    """The zygote's loop: accept the agent, fork servers on request, report their exits."""

    def __init__(
        self, config: dict, envs: Optional[list], blockers: str, serve: Callable[[dict, Optional[list]], int]
    ) -> None:
        self.config = config
        self.envs = envs
        self.blockers = blockers
        self.serve = serve
        self.children: dict = {}  # pid -> the request id it answers
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.conn: Optional[socket.socket] = None
        self.buffer = bytearray()
        self._lock_fd: Optional[int] = None
        self.wake: tuple = ()  # the pipe a child's exit (SIGCHLD) writes to
        self.runtime_name = ""  # the process name it had before it named itself a zygote

    def bind(self) -> None:
        path = self.config["zygote_socket"]
        old = os.umask(0o177)
        try:
            self.listener.bind(path)
        finally:
            os.umask(old)
        self.listener.listen(1)

    def agent_alive(self) -> bool:
        from .agent_link import probe_agent

        alive, self._lock_fd = probe_agent(self.config.get("lock_path"), self._lock_fd)
        return bool(alive)

    def accept(self) -> bool:
        """Wait for the agent's connection (its own user only); False when the agent is gone."""
        while True:
            ready, _, _ = select.select([self.listener], [], [], POLL_SECONDS)
            if ready:
                conn, _ = self.listener.accept()
                creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
                _, uid, _ = struct.unpack("3i", creds)
                if uid != os.getuid():
                    conn.close()
                    continue
                self.conn = conn
                return True
            if not self.agent_alive():
                return False

    def run(self) -> int:
        if not self.accept():
            return 0
        assert self.conn is not None
        send_frame(self.conn, {"cmd": READY, "forkable": not self.blockers, "why": self.blockers, "pid": os.getpid()})
        # A child's exit wakes the loop at once (its pipe), so the agent learns of it within
        # milliseconds: a portal's close waits for its servers' exits.
        self.wake = os.pipe()
        for end in self.wake:
            os.set_blocking(end, False)
        signal.set_wakeup_fd(self.wake[1])
        signal.signal(signal.SIGCHLD, lambda number, frame: None)
        while True:
            ready, _, _ = select.select([self.conn, self.wake[0]], [], [], POLL_SECONDS)
            if self.wake[0] in ready:
                while _drained(self.wake[0]):
                    pass
            self._reap()
            if self.conn in ready:
                data = self.conn.recv(1 << 16)
                if not data:
                    return 0  # the agent closed: its servers go on with their own lives
                self.buffer += data
                for message in take_frames(self.buffer):
                    self._handle(message)
            elif not self.agent_alive():
                return 0

    def _handle(self, message: dict) -> None:
        cmd = message.get("cmd")
        if cmd == FORK and not self.blockers:
            request, log_path = message.get("id"), message.get("log_path")
            config = message.get("config_file", message.get("config"))  # (a map inline: older agents)
            if not isinstance(config, (str, dict)) or not isinstance(log_path, str):
                raise ProtocolError("a fork request needs a config (file or map) and a log path")
            pid = os.fork()
            if pid == 0:
                self._become_server(config, log_path)
            self.children[pid] = request
            send_frame(self.conn, {"cmd": FORKED, "id": request, "pid": pid})  # type: ignore[arg-type]
        elif cmd == SIGNAL:
            target, number = message.get("pid"), message.get("signal")
            if (
                isinstance(target, int)
                and target in self.children
                and number in (signal.SIGTERM, signal.SIGKILL, signal.SIGINT)
            ):
                try:
                    os.kill(target, number)
                except ProcessLookupError:
                    pass
        else:
            raise ProtocolError(f"the zygote takes fork and signal requests, got {cmd!r:.40}")

    def _reap(self) -> None:
        while self.children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            request = self.children.pop(pid, None)
            try:
                send_frame(self.conn, {"cmd": EXITED, "id": request, "pid": pid, "status": describe_status(status)})  # type: ignore[arg-type]
            except OSError:
                pass

    def _become_server(self, config: Union[str, dict], log_path: str) -> None:
        """In the forked child: drop the zygote's ends, take a log of its own, read its config (a
        file the agent wrote, read and removed here, as ``startup.load_config`` does), serve, exit."""
        code = 1
        try:
            self.listener.close()
            if self.conn is not None:
                self.conn.close()
            signal.set_wakeup_fd(-1)
            for end in self.wake:
                os.close(end)
            if self.runtime_name:
                _name(self.runtime_name)
            for number in (signal.SIGTERM, signal.SIGINT, signal.SIGCHLD):
                signal.signal(number, signal.SIG_DFL)
            log = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(log, 1)
            os.dup2(log, 2)
            os.close(log)
            random.seed()
            numpy = sys.modules.get("numpy")
            if numpy is not None:
                numpy.random.seed()
            config = decode_config(config) if isinstance(config, str) else dict(config)
            if self.envs is not None:
                redraw_generators(self.envs)
            code = self.serve(config, self.envs)
        except BaseException:
            traceback.print_exc()
        finally:
            try:
                sys.stdout.flush()
                sys.stderr.flush()
            finally:
                os._exit(code)


ZYGOTE_NAME = "psm-zygote"  # its /proc/PID/comm (what ps shows): its forks take the runtime's back


def _name(name: str) -> str:
    """Set this process's name (``/proc/self/comm``); returns the one it had ("" off Linux)."""
    try:
        with open("/proc/self/comm") as handle:
            before = handle.read().strip()
        with open("/proc/self/comm", "w") as handle:
            handle.write(name)
        return before
    except OSError:
        return ""


def run_zygote(config: dict, make_envs: Callable[[], list], serve: Callable[[dict, Optional[list]], Any]) -> int:
    """The zygote's life: bind its socket, make the envs, tell the agent, fork until it goes."""
    threads_before = _native_threads()
    zygote = Zygote(config, [], "", serve)
    zygote.runtime_name = _name(ZYGOTE_NAME)
    zygote.bind()
    try:
        try:
            zygote.envs = make_envs()
        except Exception as exc:
            zygote.blockers = f"its envs could not be made: {type(exc).__name__}: {exc}"[:500]
        else:
            # Made only to import what they need (the agent's code may differ per env), or they
            # started threads or processes: closed, and each fork makes its own.
            agent_code = config.get("zygote_envs") == "imports"
            zygote.blockers = "" if agent_code else fork_blockers(threads_before)
            if agent_code or zygote.blockers:
                zygote.blockers = imports_only(zygote.envs, config["env_indices"], threads_before)
                zygote.envs = None
            if zygote.envs is not None:
                warm(zygote.envs)  # (read once here, not in every fork's first set_state)
        import gc

        gc.collect()
        gc.freeze()  # the objects made so far stay out of the children's collections: pages stay shared
        return zygote.run()
    finally:
        zygote.listener.close()
        try:
            os.unlink(config["zygote_socket"])
        except OSError:
            pass
