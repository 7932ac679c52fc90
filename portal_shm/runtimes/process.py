"""The embedded default backend: env servers as subprocesses of any Python interpreter."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Optional

from ..errors import PortalError
from ..wire.launch import read_tail
from . import agent_fork
from .backend import Backend, ServerHandle, ServerLaunch, describe_returncode
from .config_file import CONFIG_ENV_VAR, remove_config, write_launch_config
from .import_path import agent_import_path

if TYPE_CHECKING:
    from .hosting import HostOffer

# ``python -m`` would put the working directory first on sys.path, so a checkout of portal-shm
# there would shadow the runtime's own copy; this keeps it importable for env modules, but last.
SERVER_MAIN = (
    "import runpy, sys; sys.path.append(sys.path.pop(0)); "
    "runpy.run_module('portal_shm.server', run_name='__main__', alter_sys=True)"
)


class ProcessHandle(ServerHandle):
    def __init__(self, process: subprocess.Popen, log_path: str, python: str) -> None:
        self.process = process
        self.log_path = log_path
        self.python = python

    def exit_status(self) -> Optional[str]:
        code = self.process.poll()
        return None if code is None else describe_returncode(code)

    def log_tail(self, lines: int = 30) -> str:
        return read_tail(self.log_path, lines)

    def stop(self, timeout: float) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def describe(self) -> str:
        return f"process pid {self.process.pid}, python {self.python}"

    def host_pid(self) -> Optional[int]:
        return self.process.pid


@dataclass(frozen=True)
class ProcessBackend(Backend):
    """Runs ``python -m portal_shm.server`` with ``python`` (the agent's own by default).

    The server inherits the agent's environment variables and working directory, and looks up
    named envs (``"myenvs:cart"``) and env factories' modules on the agent's import path as
    AsyncVectorEnv's workers do: all of it under the agent's interpreter, only the agent's own
    folders under another one (``runtimes/import_path.py`` says why). It runs in a session of its
    own so that Ctrl-C in the terminal reaches only the agent, which then closes the servers in
    order instead of racing them.
    """

    python: Optional[str] = None
    name = "process"
    agent_options: ClassVar[Optional[tuple[str, ...]]] = ("python",)

    @classmethod
    def for_agent(cls, options: dict[str, Any], offer: HostOffer) -> Backend:
        return cls(python=offer.python(options.get("python")))

    def forks_servers(self) -> bool:
        return True

    def trust_boundary(self) -> Optional[str]:
        return None  # the agent's user, the agent's env code

    def start_zygote(self, launch: ServerLaunch) -> ServerHandle:
        """A zygote forked from the agent where the agent is quiet enough (``agent_fork.py``);
        else started as any server is."""
        if (self.python or sys.executable) != sys.executable or agent_fork.why_not() is not None:
            return self.start(launch)
        config = {**launch.config, "import_path": agent_import_path(True)}
        ref = write_launch_config(launch, config)
        try:
            return agent_fork.fork_zygote(SERVER_MAIN, CONFIG_ENV_VAR, ref, launch.log_path)
        except OSError as exc:
            remove_config(ref)
            raise PortalError(f"cannot fork the agent into a zygote: {exc}") from None

    def start(self, launch: ServerLaunch) -> ServerHandle:
        python = self.python or sys.executable
        same_interpreter = python == sys.executable
        env = dict(os.environ)
        config = {**launch.config, "import_path": agent_import_path(same_interpreter)}
        env[CONFIG_ENV_VAR] = write_launch_config(launch, config)
        if same_interpreter:
            package_parent = str(Path(__file__).resolve().parents[2])
            env["PYTHONPATH"] = os.pathsep.join(p for p in (package_parent, env.get("PYTHONPATH")) if p)
        with open(launch.log_path, "ab") as log:
            try:
                process = subprocess.Popen(
                    [python, "-c", SERVER_MAIN],
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                    close_fds=True,
                )
            except OSError as exc:
                remove_config(env[CONFIG_ENV_VAR])
                raise PortalError(_why_not_started(python, exc)) from None
        return ProcessHandle(process, launch.log_path, python)


def _why_not_started(python: str, exc: OSError) -> str:
    """The reason a server's process did not start, with the fix that fits that reason."""
    if exc.errno in (errno.ENOENT, errno.EACCES, errno.ENOEXEC, errno.ENOTDIR):
        return (
            f"cannot start an env server with interpreter {python!r}: {exc}; "
            "pass python= the path of an existing Python that has portal-shm installed"
        )
    if exc.errno == errno.E2BIG:
        return (
            f"cannot start an env server with interpreter {python!r}: {exc}: the agent's own environment "
            "variables are over the system's limit (each at most 128 KiB); the servers inherit them"
        )
    return f"cannot start an env server with interpreter {python!r}: {exc}"
