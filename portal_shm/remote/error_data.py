"""A local portal's error as data on the host, and the same error, with its fields, on the agent.

Both sides of one rule: ``to_data`` (host) says which fields each kind carries, ``from_data``
(agent) rebuilds the exception through its constructor, so an error from a host has the fields it
has locally (``RestartLimitError.env_indices``, ``ServerDiedError.status``, ``EnvError.env_index``
...), with env indices made this portal's (the host's plus its offset). What a host sends is
untrusted: every field is type-checked and clipped, an unknown kind becomes a ``PortalError``.
"""

from __future__ import annotations

import re
from typing import Any

from ..agent.contract.validate import MAX_TEXT
from ..errors import (
    ConnectionDroppedError,
    EnvError,
    EnvNotFoundError,
    HostPolicyError,
    InfoEncodingError,
    MessageTooBigError,
    PortalError,
    PortalTimeoutError,
    ProtocolMismatchError,
    RestartLimitError,
    ServerDiedError,
    ServerProtocolError,
    env_error_class,
)
from .messages import ERROR

_PLAIN = {
    cls.__name__: cls
    for cls in (
        PortalError,
        PortalTimeoutError,
        ServerProtocolError,
        ConnectionDroppedError,
        ProtocolMismatchError,
        HostPolicyError,
    )
}


# What a host's texts must not tell an agent: its process ids and where things live on its disks
# (a path keeps its last two parts: ``.../gymnasium/core.py`` still says which file failed).
_PID = re.compile(r"\bpid \d+")
_PATH = re.compile(r"(?<![\w.~/])(?:/[^\s/\"'():,\]\[]+)*(/[^\s/\"'():,\]\[]+/[^\s/\"'():,\]\[]+)")


def redact(text: Any) -> Any:
    """``text`` without host process ids and with host paths cut to their last two parts."""
    if not isinstance(text, str):
        return text
    return _PATH.sub(lambda m: "..." + m.group(1) if m.group(0) != m.group(1) else m.group(0), _PID.sub("pid -", text))


_REDACTED = ("message", "remote_message", "remote_traceback", "runtime", "log_tail", "status", "cause", "reason")
# An ``EnvError``'s kinds (subclasses first), by their fields.
_ENV_KINDS = {cls.__name__: cls for cls in (EnvNotFoundError, MessageTooBigError, EnvError)}
_INFO_FIELDS = ("key", "what", "hint", "cause", "boundary", "reason")  # an ``InfoEncodingError``'s own


def to_data(exc: BaseException, runtime: str = "") -> dict[str, Any]:
    """``exc`` as the fields of an error message (host side), with nothing in it of the host's own
    internals: ``runtime`` (the runtime's kind) stands for the server's description, texts are
    ``redact``-ed, and a bug of the host itself is named, its traceback left to the host's log."""
    out = _fields(exc)
    if runtime and "runtime" in out:
        out["runtime"] = runtime
    for key in _REDACTED:
        if key in out:
            out[key] = redact(out[key])
    return out


def _fields(exc: BaseException) -> dict[str, Any]:
    out: dict[str, Any] = {"cmd": ERROR, "kind": type(exc).__name__, "message": str(exc)}
    if isinstance(exc, InfoEncodingError):
        out.update(env_index=exc.env_index, phase=exc.phase, runtime=exc.runtime)
        out.update((key, getattr(exc, key)) for key in _INFO_FIELDS)
    elif isinstance(exc, EnvError):
        out.update(
            kind=next(name for name, cls in _ENV_KINDS.items() if isinstance(exc, cls)),
            env_index=exc.env_index,
            phase=exc.phase,
            error_type=exc.error_type,
            remote_message=exc.remote_message,
            remote_traceback=exc.remote_traceback,
            runtime=exc.runtime,
        )
    elif isinstance(exc, RestartLimitError):
        out.update(env_indices=exc.env_indices, restarts=exc.restarts, runtime=exc.runtime, cause=str(exc.cause))
    elif isinstance(exc, ServerDiedError):
        out.update(
            server_index=exc.server_index,
            env_indices=exc.env_indices,
            status=exc.status,
            log_tail=exc.log_tail,
            runtime=exc.runtime,
        )
    elif not isinstance(exc, PortalError):
        out["message"] = f"{type(exc).__name__}: {exc} (the traceback is in the host's log)"
    return out


def _text(header: dict[str, Any], key: str) -> str:
    value = header.get(key)
    return value[:MAX_TEXT] if isinstance(value, str) else ""


def _int(header: dict[str, Any], key: str, low: int, high: int) -> Any:
    value = header.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) and low <= value < high else None


def _indices(header: dict[str, Any], offset: int, count: int) -> Any:
    value = header.get("env_indices")
    if not isinstance(value, list) or not all(isinstance(i, int) and 0 <= i < count for i in value):
        return None
    return [offset + i for i in value]


def from_data(header: dict[str, Any], host: str, offset: int, count: int) -> Exception:
    """The host's error as the agent's own exception, naming ``host`` and this portal's env indices
    (the host serves envs ``offset`` to ``offset + count - 1``)."""
    kind, message = _text(header, "kind"), _text(header, "message")
    runtime = f"host {host}: {_text(header, 'runtime')}".rstrip(": ")
    if kind in _ENV_KINDS and _int(header, "env_index", 0, count) is not None:
        cls = _ENV_KINDS[kind] if kind != "EnvError" else env_error_class(_text(header, "error_type"))
        return cls(
            offset + header["env_index"],
            _text(header, "phase"),
            _text(header, "error_type"),
            _text(header, "remote_message"),
            _text(header, "remote_traceback"),
            runtime,
        )
    if kind == "InfoEncodingError" and _int(header, "env_index", 0, count) is not None:
        key, what, hint, cause, boundary, reason = (_text(header, key) for key in _INFO_FIELDS)
        phase = _text(header, "phase")
        return InfoEncodingError(offset + header["env_index"], phase, key, what, hint, cause, boundary, reason, runtime)
    indices = _indices(header, offset, count)
    if kind == "RestartLimitError" and indices is not None and _int(header, "restarts", 0, 1 << 31) is not None:
        return RestartLimitError(indices, header["restarts"], runtime, PortalError(_text(header, "cause")))
    if kind == "ServerDiedError" and indices is not None and _int(header, "server_index", 0, 1 << 31) is not None:
        return ServerDiedError(
            header["server_index"], indices, _text(header, "status"), _text(header, "log_tail"), runtime
        )
    text = f"env host {host} (envs {offset}-{offset + count - 1}): {message}"
    if header.get("remote_traceback"):
        text += "\n\n--- traceback on the host ---\n" + _text(header, "remote_traceback").rstrip()
    return _PLAIN.get(kind, PortalError)(text)
