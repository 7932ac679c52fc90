"""A server's config handed over as a private file: what every runtime the agent starts puts in the
server's environment (``portal_shm.wire.launch`` says why a file, and reads it on the env side).

The size is checked here, where the agent still knows which server and which env kwarg it is:
anything over ``MAX_CONFIG_BYTES`` is refused before a runtime starts, by name and size.
"""

from __future__ import annotations

from typing import Any, Optional

from ..errors import ConfigTooLargeError
from ..wire.launch import CONFIG_ENV_VAR, MAX_CONFIG_BYTES, remove_config, write_config
from ..wire.protocol import packb
from .backend import ServerLaunch

__all__ = ["CONFIG_ENV_VAR", "packed_config", "remove_config", "write_launch_config"]


def _mib(size: int) -> str:
    return f"{size / (1 << 20):.1f} MiB"


def packed_config(config: dict[str, Any], server_index: int) -> bytes:
    """``config`` packed; raises ConfigTooLargeError naming the server, the size and the largest
    env kwarg when it is over the limit."""
    data = packb(config)
    if len(data) <= MAX_CONFIG_BYTES:
        return data
    kwargs = (config.get("env") or {}).get("kwargs") or {}
    sizes = {name: len(packb(value)) for name, value in kwargs.items()}
    largest = max(sizes, key=sizes.__getitem__) if sizes else None
    culprit = f" (env_kwargs[{largest!r}] alone is {_mib(sizes[largest])})" if largest is not None else ""
    raise ConfigTooLargeError(
        f"the config of env server {server_index} packs to {_mib(len(data))}{culprit}, over the "
        f"{_mib(MAX_CONFIG_BYTES)} a server's config may hold: pass large data by reference (a file path, "
        "or have the env load it) rather than by value in env_kwargs"
    )


def write_launch_config(
    launch: ServerLaunch, config: Optional[dict[str, Any]] = None, owner: Optional[tuple[int, int]] = None
) -> str:
    """Write ``config`` (default ``launch.config``) to a 0600 file in the launch's run directory,
    given to ``owner`` (uid, gid) where the server runs as another user; returns the value for
    ``CONFIG_ENV_VAR``. The server removes the file at start; ``remove_config`` removes it after a
    start that failed, and the run directory goes with the portal in any case."""
    data = packed_config(launch.config if config is None else config, launch.server_index)
    return write_config(data, launch.run_dir, owner)
