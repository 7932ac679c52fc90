"""A process-backend zygote forked from the agent itself: no interpreter to start, no imports to redo.

The zygote of process-backend servers (``agent/local/zygotes.py``) runs the agent's own interpreter.
Started fresh it costs what any interpreter does before its first fork (~0.4 s here for numpy,
pyzmq and gymnasium), most of what a portal of one env per server takes to start. Where the agent
is as quiet as a fresh interpreter, a fork of it is that interpreter with those imports already
made, at the cost of a fork: AsyncVectorEnv makes its workers so. Its forks share the agent's pages
as well as the zygote's.

Quiet means (``why_not``): Linux; no Python thread but the calling one; no native thread but ZMQ's
and those the process had when this module was first imported (numpy's BLAS pool); no framework
loaded whose threads or devices a child cannot use after a fork (torch, jax, tensorflow); and an
agent small enough that a zygote holding a copy of its pages for the portal's life costs little.
Anything else, and the zygote starts as a fresh interpreter, as it always did.

The child enters the same entry point a fresh zygote runs (``SERVER_MAIN``: the env side is
reached through its command, never imported here), in a session of its own (Ctrl-C reaches only
the agent), with its output going to the zygote's log and the agent's arguments gone (the server
reads its own). The agent's objects stay out of its collections (``gc.freeze``: their finalizers
are the agent's), and it ends with ``os._exit``, never running the agent's exit handlers. The
agent's open descriptors stay open in it, as in AsyncVectorEnv's forked workers: closing them would
leave the agent's objects over them (a logging handler's file) writing into whatever the zygote
opens next under the same number. So another portal's ring, open as this one starts, is freed only
once this portal's servers are gone too.
"""

from __future__ import annotations

import gc
import os
import signal
import sys
import threading
import time
import traceback
import warnings
from typing import Optional

from ..wire.launch import read_tail
from .backend import ServerHandle, describe_returncode

#: Frameworks whose threads or devices a forked child cannot use (OpenMP pools, CUDA contexts).
UNFORKABLE_MODULES = ("torch", "jax", "tensorflow")
#: A bigger agent starts its zygote fresh: the zygote would hold a copy of the agent's pages
#: (whatever the agent frees later) for as long as the portal lives.
MAX_AGENT_RSS = 1 << 29


def _threads() -> list[str]:
    """The names (``comm``) of this process's threads; [] where ``/proc`` cannot say."""
    names = []
    try:
        for task in os.listdir("/proc/self/task"):
            try:
                with open(f"/proc/self/task/{task}/comm") as handle:
                    names.append(handle.read().strip())
            except OSError:
                pass
    except OSError:
        return []
    return names


def _native_threads() -> int:
    """Threads that are not ZMQ's (its context's I/O and reaper threads, which a child never uses)."""
    return sum(1 for name in _threads() if not name.startswith("ZMQbg/"))


_BASELINE = _native_threads()  # (numpy, imported before this module, started its BLAS pool)


def _settled(limit: int) -> bool:
    """Whether at most ``limit`` threads are not ZMQ's. A thread ZMQ just started has the process's
    name until it names itself: a few milliseconds are given for that."""
    for _ in range(10):
        if _native_threads() <= limit:
            return True
        time.sleep(0.005)
    return False


def _rss() -> int:
    try:
        with open("/proc/self/statm") as handle:
            return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return MAX_AGENT_RSS + 1


def why_not() -> Optional[str]:
    """Why the zygote cannot be forked from this agent now; None when it can."""
    if not sys.platform.startswith("linux") or not hasattr(os, "fork"):
        return "not Linux"
    if threading.active_count() > 1:
        return f"the agent runs {threading.active_count() - 1} other Python thread(s)"
    loaded = [name for name in UNFORKABLE_MODULES if name in sys.modules]
    if loaded:
        return f"the agent has imported {', '.join(loaded)}"
    if not _threads() or not _settled(max(_BASELINE, 1)):
        return "the agent runs native threads it did not have at start"
    if _rss() > MAX_AGENT_RSS:
        return f"the agent holds more than {MAX_AGENT_RSS >> 20} MiB"
    return None


class AgentForkHandle(ServerHandle):
    """A zygote forked from the agent: a child of the agent's, reaped by it."""

    def __init__(self, pid: int, log_path: str) -> None:
        self.pid = pid
        self.log_path = log_path
        self.status: Optional[str] = None

    def exit_status(self) -> Optional[str]:
        if self.status is None:
            try:
                pid, code = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:
                self.status = "exited (reaped elsewhere)"
                return self.status
            if pid:
                self.status = describe_returncode(os.waitstatus_to_exitcode(code))
        return self.status

    def log_tail(self, lines: int = 30) -> str:
        return read_tail(self.log_path, lines)

    def stop(self, timeout: float) -> None:
        if self.exit_status() is not None:
            return
        try:
            os.kill(self.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        deadline = time.monotonic() + timeout
        while self.exit_status() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        if self.exit_status() is None:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            while self.exit_status() is None:
                time.sleep(0.005)

    def describe(self) -> str:
        return f"process pid {self.pid} (forked from the agent), python {sys.executable}"

    def host_pid(self) -> Optional[int]:
        return self.pid


def fork_zygote(server_main: str, config_var: str, config_ref: str, log_path: str) -> AgentForkHandle:
    """Fork the agent into a zygote that runs ``server_main`` (a fresh zygote's ``-c`` code) with
    its config at ``config_ref`` (the value of ``config_var``); its output goes to ``log_path``."""
    log = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()  # (or what the agent printed would be printed again by the child)
            except (AttributeError, OSError, ValueError):
                pass
        with warnings.catch_warnings():
            # Python 3.12+ warns of any thread at a fork; the only ones here are ZMQ's and the BLAS
            # pool's (``why_not``), which the child never uses.
            warnings.simplefilter("ignore", DeprecationWarning)
            pid = os.fork()
        if pid == 0:
            _zygote_child(server_main, config_var, config_ref, log)
    finally:
        os.close(log)
    return AgentForkHandle(pid, log_path)


def _zygote_child(server_main: str, config_var: str, config_ref: str, log: int) -> None:
    code = 1
    try:
        gc.freeze()
        os.setsid()
        for number in (signal.SIGINT, signal.SIGTERM, signal.SIGCHLD):
            signal.signal(number, signal.SIG_DFL)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.environ[config_var] = config_ref
        sys.argv = ["-c"]
        try:
            exec(compile(server_main, "<portal-shm zygote>", "exec"), {"__name__": "__portal_shm_zygote__"})
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:
        traceback.print_exc()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)
