"""``make_vec`` and ``make``: gymnasium's constructors, with the env in its own runtime."""

from __future__ import annotations

from typing import Any, Optional, Union

from .backend import Backend
from .errors import PortalError
from .portal_env import Portal
from .process_backend import ProcessBackend
from .spec import EnvSpec
from .vector import VectorPortal

BACKENDS = ("process",)


def resolve_backend(backend: Union[str, Backend], **options: Any) -> Backend:
    """A Backend instance from its name (``"process"``) and options, or the instance itself."""
    if isinstance(backend, Backend):
        if options:
            raise TypeError(f"options {sorted(options)} apply to a backend name, not to a Backend instance")
        return backend
    if backend == "process":
        return ProcessBackend(**options)
    raise PortalError(f"unknown backend {backend!r}; available: {', '.join(BACKENDS)}")


def make_vec(
    id: str,
    num_envs: int = 1,
    *,
    backend: Union[str, Backend] = "process",
    vector_kwargs: Optional[dict] = None,
    python: Optional[str] = None,
    **env_kwargs: Any,
) -> VectorPortal:
    """Create ``num_envs`` copies of env ``id`` in isolated runtimes, batched as a VectorPortal.

    ``id`` is a registered id (``"CartPole-v1"``, ``"ALE/Pong-v5"``: plugins are imported inside
    the runtime) or an entry point ``"package.module:callable"``. ``env_kwargs`` go to the env's
    constructor inside its runtime; ``vector_kwargs`` to ``VectorPortal`` (``autoreset_mode``,
    ``copy``, ``ring_depth``, ``envs_per_server``, ``step_timeout`` ...). ``python`` picks the
    interpreter of the process backend (the agent's own by default).
    """
    if not isinstance(num_envs, int) or num_envs < 1:
        raise ValueError(f"num_envs must be a positive integer, got {num_envs!r}")
    options = {"python": python} if python is not None else {}
    spec = EnvSpec(id, dict(env_kwargs), resolve_backend(backend, **options))
    return VectorPortal([spec] * num_envs, **(vector_kwargs or {}))


def make(
    id: str,
    *,
    backend: Union[str, Backend] = "process",
    python: Optional[str] = None,
    vector_kwargs: Optional[dict] = None,
    **env_kwargs: Any,
) -> Portal:
    """One env ``id`` in an isolated runtime, as a plain ``gymnasium.Env``."""
    options = {"python": python} if python is not None else {}
    spec = EnvSpec(id, dict(env_kwargs), resolve_backend(backend, **options))
    return Portal(spec, **(vector_kwargs or {}))
