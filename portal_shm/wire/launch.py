"""How a runtime launches an env server: the agent's config in a private file whose path goes in
one environment variable, and the tail of the server's output log that the agent shows when the
server dies.

Runtimes (process, venv, docker, zygote forks, a listener's workers) all hand the config over the
same way, so the env side reads it in one place whatever started it. The config travels as a
file, not as the variable's value: Linux refuses to start a process whose environment holds a
string over 128 KiB (E2BIG), and env kwargs can be larger than that. The file is 0600 in the
agent's run directory (0700, bind-mounted at the same path into containers), the server reads and
removes it at start, and the agent's close removes the run directory in any case.
"""

from __future__ import annotations

import base64
import json
import os
import secrets
from typing import Any, Optional

from .protocol import packb, unpackb

CONFIG_ENV_VAR = "PORTAL_SHM_SERVER_CONFIG"
CONFIG_FILE_PREFIX = "file:"  # the variable's value: "file:PATH"; "b64:..." and JSON inline still read
MAX_CONFIG_BYTES = 64 << 20  # a server's config, packed; more is refused by the agent and the server


def write_config(data: bytes, directory: str, owner: Optional[tuple[int, int]] = None) -> str:
    """Write a packed config to a new 0600 file in ``directory`` (``owner``: (uid, gid) to give it
    to, the servers' user where it is not the writer's); returns the value for ``CONFIG_ENV_VAR``."""
    path = os.path.join(directory, f"config-{secrets.token_hex(8)}.msgpack")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(path, flags, 0o600)
    try:
        if owner is not None:
            os.fchown(fd, *owner)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    except BaseException:
        os.close(fd)
        remove_config(CONFIG_FILE_PREFIX + path)
        raise
    os.close(fd)
    return CONFIG_FILE_PREFIX + path


def remove_config(value: str) -> None:
    """Remove the file a ``CONFIG_ENV_VAR`` value names, if it still exists (a start that failed)."""
    if value.startswith(CONFIG_FILE_PREFIX):
        try:
            os.unlink(value[len(CONFIG_FILE_PREFIX) :])
        except OSError:
            pass


def read_config_file(path: str) -> dict[str, Any]:
    """The config in the file at ``path``, which is removed once read: the agent's config (tokens,
    env kwargs) stays on disk no longer than the server's start-up."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        size = os.fstat(fd).st_size
        if size > MAX_CONFIG_BYTES:
            raise ValueError(f"the config file {path} holds {size} bytes, over the {MAX_CONFIG_BYTES} a config may")
        chunks = []
        while True:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(fd)
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    config: dict[str, Any] = unpackb(b"".join(chunks))
    return config


def encode_config(config: dict[str, Any]) -> str:
    """The config inline, as one environment-variable-safe string (msgpack keeps tuples and arrays):
    what runtimes of older versions passed; kept for servers started by hand. Small configs only."""
    return "b64:" + base64.b64encode(packb(config)).decode("ascii")


def decode_config(raw: str) -> dict[str, Any]:
    """The config a ``CONFIG_ENV_VAR`` value (or ``--config``) carries: a file (read and removed),
    or inline as base64 msgpack or JSON."""
    config: dict[str, Any]
    if raw.startswith(CONFIG_FILE_PREFIX):
        config = read_config_file(raw[len(CONFIG_FILE_PREFIX) :])
    elif raw.startswith("b64:"):
        config = unpackb(base64.b64decode(raw[4:]))
    else:
        config = json.loads(raw)
    return config


def read_tail(path: str, lines: int) -> str:
    """The last ``lines`` lines of a server's log (at most its last 64 KiB), or "" if unreadable."""
    try:
        with open(path, "rb") as handle:
            handle.seek(0, 2)
            size = handle.tell()
            handle.seek(max(0, size - 64 * 1024))
            text = handle.read().decode("utf-8", "replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])
