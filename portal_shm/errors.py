"""The exceptions portal-shm raises in the agent: one base, each naming env, runtime and cause."""

from __future__ import annotations

from typing import Optional


class PortalError(Exception):
    """Base of every portal-shm error."""


class EnvError(PortalError):
    """An env raised inside its runtime; carries the env's own message and traceback."""

    def __init__(self, env_index: Optional[int], phase: str, error_type: str, message: str,
                 remote_traceback: str, runtime: str = "") -> None:
        self.env_index = env_index
        self.phase = phase
        self.error_type = error_type
        self.remote_message = message
        self.remote_traceback = remote_traceback
        self.runtime = runtime
        where = f"env {env_index}" if env_index is not None else "an env"
        text = f"{where} raised {error_type} in {phase}: {message}"
        if runtime:
            text += f" [runtime: {runtime}]"
        if remote_traceback:
            text += "\n\n--- traceback inside the env runtime ---\n" + remote_traceback.rstrip()
        super().__init__(text)


class EnvNotFoundError(EnvError):
    """The env id or entry point does not exist in the env's runtime."""

    def __init__(self, env_index: Optional[int], phase: str, error_type: str, message: str,
                 remote_traceback: str, runtime: str = "") -> None:
        super().__init__(env_index, phase, error_type, message, "", runtime)
        self.remote_traceback = remote_traceback
        self.args = (f"{message} [runtime: {runtime}]; install the package that registers it in that runtime, "
                     "or pass an entry point 'package.module:callable'",)


class ServerDiedError(PortalError):
    """An env server process or container exited while the agent needed it."""

    def __init__(self, server_index: int, env_indices: list, status: str, log_tail: str = "",
                 runtime: str = "") -> None:
        self.server_index = server_index
        self.env_indices = list(env_indices)
        self.status = status
        self.log_tail = log_tail
        text = f"env server {server_index} (envs {self.env_indices}) died: {status}"
        if runtime:
            text += f" [runtime: {runtime}]"
        if log_tail.strip():
            text += "\n\n--- last lines of its output ---\n" + log_tail.rstrip()
        super().__init__(text)


class ProtocolMismatchError(PortalError):
    """Agent and env server speak different protocol versions."""


class PortalTimeoutError(PortalError, TimeoutError):
    """An env server did not answer within the configured time."""


class ServerProtocolError(PortalError):
    """An env server sent something that breaks the protocol (corrupt, unexpected or unsafe)."""


class RestartLimitError(PortalError):
    """An env failed again after using up its restarts (``on_env_failure="restart"``)."""

    def __init__(self, env_indices: list, restarts: int, runtime: str, cause: BaseException) -> None:
        self.env_indices = list(env_indices)
        self.restarts = restarts
        self.cause = cause
        super().__init__(f"envs {self.env_indices} failed after {restarts} restarts (max_restarts) "
                         f"[runtime: {runtime}]; last failure: {cause}")
