"""A ``portal-shm host`` process on this machine, with keys of its own: for benchmarks, tests and
trying the remote backend out on one machine before there is a second one.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any, Optional, Sequence, TypeVar

from ...errors import PortalError
from ..keys import create_key_pair, make_private_dir


class LocalKeys:
    """A host key directory whose clients directory accepts one agent key pair made here."""

    def __init__(self, root: str) -> None:
        self.root = root
        self.host_dir = os.path.join(root, "host")
        self.clients_dir = os.path.join(self.host_dir, "clients")
        public, self.agent = create_key_pair(os.path.join(root, "agent"), "agent")
        make_private_dir(self.clients_dir)  # (and the host's key directory above it)
        shutil.copy(public, self.clients_dir)

    @property
    def host_key(self) -> str:
        return os.path.join(self.host_dir, "host.key")

    def options(self) -> dict[str, Any]:
        """What ``make_vec(..., backend="remote")`` needs to reach a host started with these keys."""
        return {"host_key": self.host_key, "client_key": self.agent}

    @classmethod
    def temporary(cls: type[_Keys], prefix: str = "portal-shm-keys-") -> _Keys:
        """Keys in a new private temporary directory, which ``remove`` (or the end of a ``with``
        block) deletes: a benchmark or test leaves no key material behind."""
        root = tempfile.mkdtemp(prefix=prefix)
        try:
            return cls(root)
        except BaseException:
            remove_key_dir(root)
            raise

    def remove(self) -> None:
        """Delete the key directory, secret keys first (``remove_key_dir``)."""
        remove_key_dir(self.root)

    def __enter__(self: _Keys) -> _Keys:
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()


_Keys = TypeVar("_Keys", bound=LocalKeys)


def remove_key_dir(root: str) -> None:
    """Delete ``root``: its secret key files (``*_secret``) first, so that a removal cut short (an
    error, a signal) leaves no secret behind, then everything else. Unlinked, not overwritten:
    on journaling and copy-on-write filesystems an overwrite guarantees nothing more."""
    for folder, _, files in os.walk(root):
        for name in files:
            if name.endswith("_secret"):
                try:
                    os.unlink(os.path.join(folder, name))
                except FileNotFoundError:
                    pass
    shutil.rmtree(root, ignore_errors=True)


def _die_with_parent() -> None:
    """In the child: SIGTERM when the process that started it dies (Linux), so a test run or a
    benchmark killed before it stopped its hosts leaves none behind."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def collect_after(pid: int) -> None:
    """What ``portal-shm gc`` frees of a dead process ``pid`` (a host's run directories)."""
    from ...runtimes import gc

    for leftover in gc.find_leftovers():
        if leftover.owner_pid == pid:
            gc.remove(leftover)


def start_host(
    args: Sequence[str], env: Optional[dict[str, str]] = None, stderr: int = subprocess.STDOUT
) -> subprocess.Popen[str]:
    """``python -m portal_shm host ARGS`` with its stdout a text pipe (and its stderr in it, unless
    ``stderr`` says otherwise), in a process group of its own (``kill_host``), in the environment
    ``env`` (default: this one's). The host is stopped when the thread that started it exits."""
    return subprocess.Popen(
        [sys.executable, "-m", "portal_shm", "host", *args],
        stdout=subprocess.PIPE,
        stderr=stderr,
        text=True,
        start_new_session=True,
        preexec_fn=_die_with_parent,
        env=env,
    )


def kill_host(process: subprocess.Popen[str]) -> None:
    """SIGKILL a host started by ``start_host`` and everything in its process group, as a crash
    would; then, as ``portal-shm gc`` would, free the run directories the host can no longer remove."""
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    collect_after(process.pid)


class HostProcess:
    """``python -m portal_shm host`` on 127.0.0.1 (a free port unless ``port``); keeps its log.

    Start it from a thread that lives as long as the host should: the host is stopped when the
    thread that started it exits (``PR_SET_PDEATHSIG``), and with it whoever started that thread.
    """

    def __init__(self, keys: Optional[LocalKeys], *args: str, port: int = 0, timeout: float = 30.0) -> None:
        command = ["--bind", f"tcp://127.0.0.1:{port}", *args]
        if keys is None:
            command.append("--insecure")
        else:
            command += ["--keys", keys.host_dir, "--clients", keys.clients_dir]
        self.process = start_host(command)
        self.lines: list[Any] = []
        self.address = ""
        ready = threading.Event()

        def read() -> None:
            for line in self.process.stdout or ():
                self.lines.append(line)
                found = re.search(r" at (tcp://127\.0\.0\.1:\d+)", line)
                if found and not self.address:
                    self.address = found.group(1)
                    ready.set()
            ready.set()

        threading.Thread(target=read, daemon=True).start()
        if not ready.wait(timeout) or not self.address:
            self.stop()
            raise PortalError("portal-shm host did not start:\n" + "".join(self.lines))

    @property
    def log(self) -> str:
        return "".join(self.lines)

    def wait_for_log(self, text: str, seconds: float, since: int = 0) -> bool:
        """Whether ``text`` shows in the log (past its first ``since`` characters) within ``seconds``."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if text in self.log[since:]:
                return True
            time.sleep(0.05)
        return False

    def kill(self) -> None:
        """SIGKILL the host and its process group, then free what it left (``kill_host``)."""
        kill_host(self.process)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(60)
            except subprocess.TimeoutExpired:
                self.kill()
