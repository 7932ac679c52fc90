"""``make_vec`` and ``make``: gymnasium's constructors, with the env in its own runtime."""

from __future__ import annotations

import dataclasses
from typing import Any, Optional, Union

from .backend import Backend
from .errors import PortalError
from .portal_env import Portal
from .attach_backend import AttachBackend
from .docker_backend import DockerBackend
from .micromamba_backend import MicromambaBackend
from .process_backend import ProcessBackend
from .spec import EnvSpec
from .venv_backend import VenvBackend
from .vector import VectorPortal

# Backend name -> class; each class is a dataclass whose fields are its options.
BACKENDS: dict[str, type] = {"process": ProcessBackend, "docker": DockerBackend, "attach": AttachBackend,
                             "venv": VenvBackend, "micromamba": MicromambaBackend}


def backend_option_names(backend: Union[str, Backend]) -> set:
    if isinstance(backend, Backend):
        return set()
    cls = BACKENDS.get(backend)
    return {field.name for field in dataclasses.fields(cls)} if cls is not None else set()


def resolve_backend(backend: Union[str, Backend], **options: Any) -> Backend:
    """A Backend instance from its name (``"process"``, ...) and options, or the instance itself."""
    if isinstance(backend, Backend):
        if options:
            raise TypeError(f"options {sorted(options)} apply to a backend name, not to a Backend instance")
        return backend
    cls = BACKENDS.get(backend)
    if cls is None:
        raise PortalError(f"unknown backend {backend!r}; available: {', '.join(sorted(BACKENDS))}")
    return cls(**options)


def _spec(id: str, backend: Union[str, Backend], env_kwargs: Optional[dict], kwargs: dict) -> EnvSpec:
    """Split keyword arguments into the backend's options and the env's kwargs."""
    names = backend_option_names(backend)
    options = {key: kwargs.pop(key) for key in list(kwargs) if key in names}
    return EnvSpec(id, {**kwargs, **(env_kwargs or {})}, resolve_backend(backend, **options))


def make_vec(
    id: str,
    num_envs: int = 1,
    *,
    backend: Union[str, Backend] = "process",
    vector_kwargs: Optional[dict] = None,
    env_kwargs: Optional[dict] = None,
    **kwargs: Any,
) -> VectorPortal:
    """Create ``num_envs`` copies of env ``id`` in isolated runtimes, batched as a VectorPortal.

    ``id`` is a registered id (``"CartPole-v1"``, ``"ALE/Pong-v5"``: plugins are imported inside
    the runtime) or an entry point ``"package.module:callable"``. Keyword arguments named like an
    option of the backend (``python=`` for ``"process"``) configure the backend; all others go to
    the env's constructor inside its runtime (``env_kwargs={...}`` passes ones whose names clash).
    ``vector_kwargs`` go to ``VectorPortal`` (``autoreset_mode``, ``copy``, ``ring_depth``,
    ``envs_per_server``, ``step_timeout`` ...).
    """
    if not isinstance(num_envs, int) or num_envs < 1:
        raise ValueError(f"num_envs must be a positive integer, got {num_envs!r}")
    spec = _spec(id, backend, env_kwargs, kwargs)
    return VectorPortal([spec] * num_envs, **(vector_kwargs or {}))


def make(
    id: str,
    *,
    backend: Union[str, Backend] = "process",
    vector_kwargs: Optional[dict] = None,
    env_kwargs: Optional[dict] = None,
    **kwargs: Any,
) -> Portal:
    """One env ``id`` in an isolated runtime, as a plain ``gymnasium.Env``; arguments as ``make_vec``."""
    return Portal(_spec(id, backend, env_kwargs, kwargs), **(vector_kwargs or {}))
