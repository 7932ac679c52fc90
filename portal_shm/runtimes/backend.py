"""What every backend provides: start env servers somewhere, report their health, stop them.

Nothing outside a backend knows whether servers are processes, venvs or containers: the vector
env only sees ``Backend.start`` and the ``ServerHandle`` it returns.
"""

from __future__ import annotations

import signal
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Optional

from ..errors import HostPolicyError

if TYPE_CHECKING:
    from .hosting import HostOffer


@dataclass
class ServerLaunch:
    """Everything a backend needs to start one env server."""

    server_index: int
    env_indices: list
    config: dict
    run_dir: str
    log_path: str
    generation: int = 0  # 0 for a server's first runtime; later ones (restarts, spares) count up


class ServerHandle(ABC):
    """One running env server, as its backend sees it."""

    @abstractmethod
    def exit_status(self) -> Optional[str]:
        """None while running; a human description ("exit code 1", "killed by SIGSEGV") once gone."""

    @abstractmethod
    def log_tail(self, lines: int = 30) -> str:
        """The last lines the server printed, for error reports."""

    @abstractmethod
    def stop(self, timeout: float) -> None:
        """Make sure the server is gone: ask, wait up to ``timeout``, then force."""

    @abstractmethod
    def describe(self) -> str:
        """Short text naming the runtime, for error messages."""

    def host_pid(self) -> Optional[int]:
        """The server's process (a container's init) as this host numbers it, where known: what
        CPU accounting (``portal-shm bench``) and ``top`` find it by."""
        return None


class Backend(ABC):
    """A kind of runtime (process, venv, docker) in which env servers run."""

    name: str = "backend"
    #: The options an agent may set when an env host runs this backend for it (``portal-shm host``);
    #: every other field is the host operator's. None: env hosts never run this backend.
    agent_options: ClassVar[Optional[tuple[str, ...]]] = None
    #: What a host's refusal of any other option adds: what holds however the agent asks.
    operator_note: ClassVar[str] = ""

    def start_zygote(self, launch: ServerLaunch) -> ServerHandle:
        """Start a zygote of this backend's servers (``agent/local/zygotes.py``): as a server is
        started, unless the backend knows a faster way (the process backend forks the agent)."""
        return self.start(launch)

    @classmethod
    def for_agent(cls, options: dict[str, Any], offer: HostOffer) -> Backend:
        """This backend as an env host runs it for an agent elsewhere: built from the operator's
        values, with ``options`` (the agent's, named in ``agent_options``: the host checked the
        names) checked value by value against what the host ``offer``s.

        Raises:
            HostPolicyError: A value the operator does not allow, naming the flag that would.
        """
        raise HostPolicyError(f"env hosts do not run envs on the {cls.name} runtime")

    @abstractmethod
    def start(self, launch: ServerLaunch) -> ServerHandle:
        """Start one env server; must not wait for it to be ready."""

    def run_dir_base(self) -> Optional[str]:
        """Where this backend needs the portal's run directory (None: the default temp dir)."""
        return None

    def runtime_owner(self) -> Optional[tuple]:
        """(uid, gid) the servers run as when that is not the agent's own, else None.

        The portal's run directory and sockets are then handed to that user
        (they stay 0600/0700): a server must be able to open them, and no one else.
        """
        return None

    def forks_servers(self) -> bool:
        """Whether its servers are processes of this machine that a zygote of the same runtime may
        fork (recycling's spares, ``agent/local/zygotes.py``); containers and actors start fresh."""
        return False

    def trust_boundary(self) -> Optional[str]:
        """What separates its servers from the agent as a security boundary ("container"), or None
        where nothing does (the agent's user runs the agent's env code: process, venv, micromamba).
        An env's infos cross a boundary only as msgpack carries them exactly; from a server without
        one, what msgpack cannot carry comes pickled (``wire/info_codec.py``)."""
        return "runtime"

    def max_envs_per_server(self) -> Optional[int]:
        """An upper bound the runtime imposes (e.g. one emulator per process), or None."""
        return None

    def key(self) -> tuple:
        """Envs whose backends have equal keys may share a server."""
        return (type(self).__name__,) + tuple(sorted(vars(self).items()))


def describe_returncode(code: int) -> str:
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"killed by {name} (exit status {code})"
    return f"exit code {code}"
