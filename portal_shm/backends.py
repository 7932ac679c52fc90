"""Where envs run: the backends a portal starts its env servers with, the portals of remote hosts
and Ray clusters, and what configures them (``EnvSpec``, a host's ``HostPolicy``).

``make_vec(..., backend="docker")`` names a backend by its string; these classes are for code that
builds one itself (``VectorPortal(EnvSpec(...), backend=DockerBackend(image=...))``) or checks
what a portal runs on. Each name is imported on first use: importing this module imports neither
Docker's client nor Ray nor gymnasium.
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "Backend": "runtimes.backend",
    "ProcessBackend": "runtimes.process",
    "VenvBackend": "runtimes.venv",
    "MicromambaBackend": "runtimes.micromamba",
    "DockerBackend": "runtimes.docker",
    "AttachBackend": "runtimes.attach",
    "RemoteBackend": "remote.client.backend",
    "RayBackend": "cluster.backend",
    "RemoteVectorPortal": "remote.client.vector",
    "RayVectorPortal": "cluster.vector",
    "HostPolicy": "remote.host.policy",
    "EnvSpec": "agent.local.spec",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(f"portal_shm.{_LAZY[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*__all__, *(name for name in globals() if name.startswith("__"))})
