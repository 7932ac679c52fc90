"""portal-shm: step RL envs that live in isolated runtimes as fast as if they were in-process.

The top level holds what a training script uses every day; the rest lives in namespaces:
``portal_shm.backends`` (the runtimes envs run in, remote and Ray portals, ``EnvSpec``,
``HostPolicy``), ``portal_shm.errors`` (every exception), ``portal_shm.envpool`` and
``portal_shm.sb3`` (drop-ins). Everything is imported lazily so that env runtimes, which only need
``portal_shm.server`` (and ``portal_shm.wire``), never import gymnasium, rich or the agent's other
dependencies.
"""

from __future__ import annotations

import importlib
import warnings
from typing import Any

from .version import __version__

_LAZY = {
    "make_vec": "api",
    "make": "api",
    "make_vec_ma": "multi_agent",
    "load_tuning": "tuning",
    "VectorPortal": "agent.vector",
    "PortalVectorEnv": "agent.contract.base",
    "Portal": "agent.portal_env",
    "MultiAgentPortal": "agent.multi_agent.portal",
    "AgentBatch": "agent.multi_agent.portal",
    "RecordVideo": "agent.video.record_video",
    "restart_seed": "agent.contract.restarts",
    "PortalError": "errors",
    "EnvError": "errors",
}

# Names the top level used to hold, by the namespace that holds them now: they still import from
# here, with a DeprecationWarning (once a name) naming their place.
_MOVED = {
    **dict.fromkeys(
        [
            "Backend",
            "ProcessBackend",
            "VenvBackend",
            "MicromambaBackend",
            "DockerBackend",
            "AttachBackend",
            "RemoteBackend",
            "RayBackend",
            "RemoteVectorPortal",
            "RayVectorPortal",
            "HostPolicy",
            "EnvSpec",
        ],
        "backends",
    ),
    **dict.fromkeys(
        [
            "EnvNotFoundError",
            "MessageTooBigError",
            "InfoEncodingError",
            "ServerDiedError",
            "ProtocolMismatchError",
            "PortalTimeoutError",
            "ServerProtocolError",
            "ConfigTooLargeError",
            "ConnectionDroppedError",
            "RestartLimitError",
            "HostLostError",
            "HostPolicyError",
        ],
        "errors",
    ),
}
_warned: set[str] = set()
_NAMESPACES = ("backends", "errors")  # (reached as attributes too: ``portal_shm.errors.HostLostError``)

__all__ = [
    "make_vec",
    "make",
    "make_vec_ma",
    "load_tuning",
    "VectorPortal",
    "PortalVectorEnv",
    "Portal",
    "MultiAgentPortal",
    "AgentBatch",
    "RecordVideo",
    "restart_seed",
    "serve",
    "PortalError",
    "EnvError",
    "__version__",
]


def serve(env_factory: Any, config: Any = None) -> None:
    """Serve envs made by ``env_factory(**env_kwargs)`` to the agent that started this runtime."""
    from .server.startup import serve as _serve

    _serve(env_factory, config)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    if name in _NAMESPACES:
        return importlib.import_module(f".{name}", __name__)
    if name in _MOVED:
        place = f"{__name__}.{_MOVED[name]}"
        if name not in _warned:
            _warned.add(name)
            warnings.warn(
                f"{name} has moved to {place}.{name} (`from {place} import {name}`); "
                f"importing it from {__name__} is deprecated",
                DeprecationWarning,
                stacklevel=2,
            )
        return getattr(importlib.import_module(place), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    """The everyday names and the namespaces, not the names kept only for old imports."""
    return sorted({*__all__, *_NAMESPACES, *(name for name in globals() if name.startswith("__"))})
