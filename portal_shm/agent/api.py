"""``make_vec`` and ``make``: gymnasium's constructors, with the env in its own runtime."""

from __future__ import annotations

from typing import Any, Optional, Union

from ..runtimes.backend import Backend
from ..runtimes.registry import backend_option_names, resolve_backend
from .portal_env import Portal
from .spec import EnvSpec
from .vector import VectorPortal


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
