"""How a runtime launches an env server: the agent's config in one environment variable, and the
tail of the server's output log that the agent shows when the server dies.

Runtimes (process, venv, docker, a listener's workers) all hand the config over the same way, so
the env side reads it in one place whatever started it.
"""

from __future__ import annotations

import base64
import json
from typing import Any

from . import protocol as P

CONFIG_ENV_VAR = "PORTAL_SHM_SERVER_CONFIG"


def encode_config(config: dict[str, Any]) -> str:
    """The config as one environment-variable-safe string (msgpack keeps tuples and arrays)."""
    return "b64:" + base64.b64encode(P.packb(config)).decode("ascii")


def decode_config(raw: str) -> dict[str, Any]:
    config: dict[str, Any]
    if raw.startswith("b64:"):
        config = P.unpackb(base64.b64decode(raw[4:]))
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
