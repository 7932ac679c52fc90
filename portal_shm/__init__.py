"""portal-shm: step RL envs that live in isolated runtimes as fast as if they were in-process.

The agent-side API is imported lazily so that env runtimes, which only need
``portal_shm.server`` (and ``portal_shm.wire``), never import gymnasium, rich or the agent's other dependencies.
"""

from __future__ import annotations

from typing import Any

from .version import __version__

_LAZY = {
    "make_vec": "api",
    "make": "api",
    "make_vec_ma": "multi_agent",
    "MultiAgentPortal": "agent.multi_agent.portal",
    "AgentBatch": "agent.multi_agent.portal",
    "load_tuning": "tuning",
    "VectorPortal": "agent.vector",
    "PortalVectorEnv": "agent.contract.base",
    "Portal": "agent.portal_env",
    "RecordVideo": "agent.video.record_video",
    "EnvSpec": "agent.local.spec",
    "ProcessBackend": "runtimes.process",
    "Backend": "runtimes.backend",
    "DockerBackend": "runtimes.docker",
    "AttachBackend": "runtimes.attach",
    "VenvBackend": "runtimes.venv",
    "MicromambaBackend": "runtimes.micromamba",
    "PortalError": "errors",
    "EnvError": "errors",
    "EnvNotFoundError": "errors",
    "MessageTooBigError": "errors",
    "InfoEncodingError": "errors",
    "ServerDiedError": "errors",
    "ProtocolMismatchError": "errors",
    "PortalTimeoutError": "errors",
    "ServerProtocolError": "errors",
    "ConfigTooLargeError": "errors",
    "ConnectionDroppedError": "errors",
    "RestartLimitError": "errors",
    "HostLostError": "errors",
    "HostPolicyError": "errors",
    "HostPolicy": "remote.host.policy",
    "RayBackend": "cluster.backend",
    "RayVectorPortal": "cluster.vector",
    "RemoteBackend": "remote.client.backend",
    "RemoteVectorPortal": "remote.client.vector",
    "restart_seed": "agent.contract.restarts",
}

__all__ = sorted(_LAZY) + ["serve", "__version__"]


def serve(env_factory: Any, config: Any = None) -> None:
    """Serve envs made by ``env_factory(**env_kwargs)`` to the agent that started this runtime."""
    from .server.startup import serve as _serve

    _serve(env_factory, config)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        module = importlib.import_module(f".{_LAZY[name]}", __name__)
        return getattr(module, name)
    raise AttributeError(f"module 'portal_shm' has no attribute {name!r}")
