"""An env server's control socket to its agent, and whether that agent still lives.

The agent holds an exclusive record lock on its lock file for as long as it lives (``probe_agent``):
the server checks it while it waits for a command, and a watchdog thread checks it while an env
holds the main thread (``AgentLink.watch``). Python 3.9 syntax: this runs in env runtimes.
"""

from __future__ import annotations

import fcntl
import os
import threading
import time
from typing import Any, Optional

import zmq

from ..wire.protocol import ProtocolError, packb, unpackb
from .errors import AgentGone
from .sizes import cap_of, fitted

IDLE_CHECK_SECONDS = 0.5
WATCHDOG_GRACE_SECONDS = 3.0


class AgentLink:
    """The DEALER socket a server talks to its agent on, and the agent's lock file."""

    def __init__(self, config: dict, env_indices: list) -> None:
        self.env_indices = env_indices
        self.lock_path: Optional[str] = config.get("lock_path")
        self.run_dir: Optional[str] = config.get("run_dir")
        self.context = zmq.Context()
        self.socket = self.context.socket(zmq.DEALER)
        self.socket.setsockopt(zmq.LINGER, 2000)
        self.socket.connect(config["control_address"])
        self.max_message = cap_of(config)  # the agent's socket drops a bigger message, and the connection
        self._lock_fd: Optional[int] = None

    def send(self, message: dict, about: str = "", env_indices: Optional[list] = None) -> bool:
        """Send one control message; one over the agent's cap goes as an ERROR naming what was too
        big (``sizes.py``), and then False. ``about``: the command it answers; ``env_indices``: the
        envs its ``results`` belong to."""
        return self.send_packed(packb(message), message, about, env_indices)

    def send_packed(self, data: bytes, message: dict, about: str, env_indices: Optional[list]) -> bool:
        """``send`` of a message already packed (``data``)."""
        refusal = fitted(data, message, self.max_message, about, env_indices or self.env_indices)
        self.socket.send(data if refusal is None else refusal, copy=False)
        return refusal is None

    def alive(self) -> bool:
        """Whether the agent still holds its lock."""
        alive, self._lock_fd = probe_agent(self.lock_path, self._lock_fd)
        return alive

    def recv(self) -> dict:
        """The agent's next control message; raises ``AgentGone`` once the agent died waiting for it."""
        while not self.socket.poll(int(IDLE_CHECK_SECONDS * 1000)):
            if not self.alive():
                raise AgentGone()
        message = unpackb(self.socket.recv())
        if not isinstance(message, dict):
            raise ProtocolError("control message is not a map")
        return message

    def answer_within(self, seconds: float) -> Any:
        """The agent's next message as it came (not checked), or None when the agent died or said
        nothing within ``seconds``."""
        deadline = time.monotonic() + seconds
        while not self.socket.poll(int(IDLE_CHECK_SECONDS * 1000)):
            if not self.alive() or time.monotonic() > deadline:
                return None
        return unpackb(self.socket.recv())

    def watch(self) -> None:
        """Exit even when an env hangs (sleep, infinite loop) after the agent has died.

        The main thread notices a dead agent only between commands; this daemon thread checks
        the agent's lock every second, and when the main thread has not cleaned up within a
        grace period (it is stuck inside an env), it unlinks what the agent owned and exits.
        A hang in C code that holds the GIL cannot be helped here: ``gc`` and the agent's
        ``stop`` (kill) remain for those.
        """
        lock_path, run_dir = self.lock_path, self.run_dir

        def watch() -> None:
            fd = None
            while True:
                time.sleep(1.0)
                alive, fd = probe_agent(lock_path, fd)
                if not alive:
                    time.sleep(WATCHDOG_GRACE_SECONDS)
                    unlink_run_dir(run_dir)
                    os._exit(0)

        threading.Thread(target=watch, name="portal-shm-agent-watchdog", daemon=True).start()

    def close(self, agent_gone: bool) -> None:
        """Close the socket; when the agent died, also unlink what it can no longer unlink."""
        if agent_gone or not self.alive():  # (it may have died while the envs closed)
            unlink_run_dir(self.run_dir)
        self.socket.close(linger=0 if agent_gone else 2000)
        self.context.term()


def unlink_run_dir(run_dir: Optional[str]) -> None:
    """Remove the run directory of a dead agent (it cannot any more; the ring has no name)."""
    if run_dir and os.path.isdir(run_dir):
        for name in os.listdir(run_dir):
            try:
                os.unlink(os.path.join(run_dir, name))
            except OSError:
                pass
        try:
            os.rmdir(run_dir)
        except OSError:
            pass


def probe_agent(path: Optional[str], fd: Optional[int]) -> tuple:
    """(agent alive?, descriptor to reuse): free lock or vanished lock file means gone."""
    if not path:
        return True, fd
    if fd is None:
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            return False, None
    try:
        fcntl.lockf(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError:
        return True, fd
    fcntl.lockf(fd, fcntl.LOCK_UN)
    return False, fd
