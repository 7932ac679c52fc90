"""The exceptions portal-shm raises in the agent: one base, each naming env, runtime and cause."""

from __future__ import annotations

import builtins
import difflib
import multiprocessing
from typing import Iterable, Optional

__all__ = [
    "PortalError",
    "EnvError",
    "EnvNotFoundError",
    "MessageTooBigError",
    "InfoEncodingError",
    "ServerDiedError",
    "ProtocolMismatchError",
    "PortalTimeoutError",
    "ServerProtocolError",
    "ConnectionDroppedError",
    "ConfigTooLargeError",
    "RestartLimitError",
    "HostPolicyError",
    "HostLostError",
    "DockerUnavailableError",
]


class PortalError(Exception):
    """Base of every portal-shm error."""


class EnvError(PortalError):
    """An env raised inside its runtime; carries the env's own message and traceback.

    A kind of env error that reads otherwise (a missing env, a message too big) says so in
    ``describe``; the fields are the same for all.
    """

    def __init__(
        self,
        env_index: Optional[int],
        phase: str,
        error_type: str,
        message: str,
        remote_traceback: str,
        runtime: str = "",
    ) -> None:
        self.env_index = env_index
        self.phase = phase
        self.error_type = error_type
        self.remote_message = message
        self.remote_traceback = remote_traceback
        self.runtime = runtime
        super().__init__(self.describe())

    def describe(self) -> str:
        """The error's message, made of its fields."""
        where = f"env {self.env_index}" if self.env_index is not None else "an env"
        text = _naming_runtime(f"{where} raised {self.error_type} in {self.phase}: {self.remote_message}", self.runtime)
        if self.remote_traceback:
            text += "\n\n--- traceback inside the env runtime ---\n" + self.remote_traceback.rstrip()
        return text


class EnvNotFoundError(EnvError):
    """The env id or entry point does not exist in the env's runtime. The env side's message names
    what it searched and what to do (it knows whether it shares the agent's files); this adds the
    runtime."""

    def describe(self) -> str:
        return _naming_runtime(self.remote_message, self.runtime)


class MessageTooBigError(EnvError):
    """What an env gave (its infos, the result of a call) did not fit one control message
    (``portal_shm.wire.protocol.MAX_MESSAGE_BYTES``): its server did not send it and said so
    instead, naming the env, what was too big and the cap. The env did not crash, and the same
    value would come back: ``on_env_failure="restart"`` does not restart it, the caller gets this."""

    def describe(self) -> str:
        where = f"env {self.env_index}" if self.env_index is not None else "an env server"
        return _naming_runtime(f"{where} ({self.phase}): {self.remote_message}", self.runtime)


class InfoEncodingError(EnvError, TypeError):
    """An env's infos held a value that cannot reach the agent as it is: msgpack cannot carry it
    exactly and its server's runtime is a trust boundary (a container, a remote host: the agent
    never unpickles from those), or it cannot be pickled, or the agent cannot unpickle it. The
    env did not crash and the same value would come again: ``on_env_failure="restart"`` does not
    restart it, the caller gets this. ``key`` is the value's path (``infos['stats']['when']``),
    ``what`` its type; ``docs/concepts/infos.md`` lists what infos may hold on each runtime."""

    def __init__(
        self,
        env_index: Optional[int],
        phase: str,
        key: str,
        what: str,
        hint: str,
        cause: str,
        boundary: str = "",
        reason: str = "",
        runtime: str = "",
    ) -> None:
        self.key, self.what, self.hint = key, what, hint
        self.cause, self.boundary, self.reason = cause, boundary, reason
        where = f"env {env_index}'s" if env_index is not None else "an env's"
        if cause == "boundary":
            text = (
                f"{where} {key} is {what} that cannot cross the {boundary or 'runtime'} boundary exactly; {hint}, "
                "or pass vector_kwargs={'infos': 'lossy'} (VectorPortal(..., infos='lossy')) to send such values "
                "converted (an enum member as its value, a namedtuple as a tuple, anything else as its repr())"
            )
        elif cause == "unpickle":
            text = (
                f"{where} {key} holds {what} that the agent cannot unpickle ({reason}): install in the agent "
                f"what defines it, as in the env's runtime, or have the env {hint.replace(' instead', '')}"
            )
        else:
            text = f"{where} {key} is {what} that cannot be pickled to leave its runtime ({reason}); {hint}"
        super().__init__(env_index, phase, "InfoEncodingError", text, "", runtime)

    def describe(self) -> str:
        return _naming_runtime(self.remote_message, self.runtime)


class ServerDiedError(PortalError):
    """An env server process or container exited while the agent needed it."""

    def __init__(
        self, server_index: int, env_indices: list[int], status: str, log_tail: str = "", runtime: str = ""
    ) -> None:
        self.server_index = server_index
        self.env_indices = list(env_indices)
        self.status = status
        self.log_tail = log_tail
        self.runtime = runtime
        text = _naming_runtime(f"env server {server_index} (envs {self.env_indices}) died: {status}", runtime)
        if log_tail.strip():
            text += "\n\n--- last lines of its output ---\n" + log_tail.rstrip()
        super().__init__(text)


class ProtocolMismatchError(PortalError):
    """Agent and env server speak different protocol versions."""


class PortalTimeoutError(PortalError, TimeoutError, multiprocessing.TimeoutError):
    """An env server did not answer within the configured time.

    Also a ``multiprocessing.TimeoutError``, what gymnasium's ``AsyncVectorEnv`` raises when
    ``step_wait(timeout=...)`` and friends time out, so code written against it keeps working.
    """


class ServerProtocolError(PortalError):
    """An env server sent something that breaks the protocol (corrupt, unexpected or unsafe)."""


class ConnectionDroppedError(ServerProtocolError):
    """An env server's control connection dropped while the server still ran: ZeroMQ at the agent
    drops a message over its cap (``MAX_MESSAGE_BYTES``) together with the connection, silently,
    so what the server sent is lost. Servers of this version check the cap before they send; an
    env that writes to its server's socket, or a server of another version, can still do it."""


class ConfigTooLargeError(PortalError, ValueError):
    """An env server's config (its env kwargs, mostly) packs to more than a server may be handed
    (``portal_shm.wire.launch.MAX_CONFIG_BYTES``); the message names the server, the size and
    the largest env kwarg."""


# Exception types that cannot carry an EnvError's message (their __str__ reads other fields) or
# that change control flow when raised (StopIteration inside generators).
_NOT_MIRRORED = {
    "StopIteration",
    "StopAsyncIteration",
    "UnicodeError",
    "UnicodeDecodeError",
    "UnicodeEncodeError",
    "UnicodeTranslateError",
    "ExceptionGroup",
    "BaseExceptionGroup",
}
_mirrors: dict[tuple[type[EnvError], type[Exception]], type[EnvError]] = {}


def env_error_class(error_type: str, base: type[EnvError] = EnvError) -> type[EnvError]:
    """The agent-side class for an env's exception named ``error_type``.

    An env that raises ``ValueError`` gives an ``EnvError`` that is also a ``ValueError`` (likewise
    for the other built-in exceptions and ``gymnasium.error``'s), so ``except ValueError`` in the
    agent behaves as with gymnasium's vector envs. Only the name crosses the boundary: the class
    is looked up among those the agent already has, never created from what the env sent.
    """
    found: Optional[type] = None
    module, _, name = error_type.rpartition(".")
    if module == "" and name not in _NOT_MIRRORED:
        found = getattr(builtins, name, None)
    elif module.startswith("gymnasium.error"):
        import gymnasium.error

        found = getattr(gymnasium.error, name, None)
    if not (isinstance(found, type) and issubclass(found, Exception)) or issubclass(found, base):
        return base
    key = (base, found)
    if key not in _mirrors:
        try:
            _mirrors[key] = type(
                f"{base.__name__}[{found.__name__}]",
                (base, found),
                {"__module__": __name__, "__str__": Exception.__str__},
            )
        except TypeError:  # incompatible layouts
            _mirrors[key] = base
    return _mirrors[key]


class RestartLimitError(PortalError):
    """An env failed again after using up its restarts (``on_env_failure="restart"``)."""

    def __init__(self, env_indices: list[int], restarts: int, runtime: str, cause: BaseException) -> None:
        self.env_indices = list(env_indices)
        self.restarts = restarts
        self.runtime = runtime
        self.cause = cause
        super().__init__(
            f"envs {self.env_indices} failed after {restarts} restarts (max_restarts) "
            f"[runtime: {runtime}]; last failure: {cause}"
        )


class HostPolicyError(PortalError):
    """An env host refused what an agent asked for: its operator's allow-lists do not include it
    (an env id, entry point, runtime option, vector or env kwarg, or an attribute name). The
    message names the ``portal-shm host`` flag that would allow it."""


class HostLostError(PortalError):
    """A remote env host stopped answering (killed, cut off, or its network down)."""

    def __init__(self, host: str, env_indices: list[int], detail: str) -> None:
        self.host = host
        self.env_indices = list(env_indices)
        super().__init__(f"lost env host {host} (envs {_span(self.env_indices)}): {detail}")


def close_match(name: object, choices: Iterable[str], cutoff: float = 0.6) -> Optional[str]:
    """The one of ``choices`` closest to ``name`` (difflib's ratio at least ``cutoff``), else None."""
    if not isinstance(name, str):
        return None
    found = difflib.get_close_matches(name, sorted(set(choices)), n=1, cutoff=cutoff)
    return found[0] if found else None


def did_you_mean(name: object, choices: Iterable[str]) -> str:
    """``"; did you mean 'docker'?"`` for the choice close to ``name``, or "": the suffix of a
    message that refuses ``name``."""
    match = close_match(name, choices)
    return f"; did you mean {match!r}?" if match is not None else ""


def _naming_runtime(text: str, runtime: str) -> str:
    """``text`` with the runtime it came from, where one is known."""
    return f"{text} [runtime: {runtime}]" if runtime else text


def _span(indices: list[int]) -> str:
    if len(indices) > 2 and indices == list(range(indices[0], indices[-1] + 1)):
        return f"{indices[0]}-{indices[-1]}"
    return ", ".join(map(str, indices))


class DockerUnavailableError(PortalError):
    """The docker SDK is missing or the Docker daemon cannot be reached (the docker backend, the
    image commands): the message says how to get it, or to use another backend."""
