"""``make_vec`` and ``make``: gymnasium's constructors, with the env in its own runtime.

The one place that knows every kind of portal: a local ``VectorPortal`` for the local runtimes,
a ``RemoteVectorPortal`` for envs on hosts elsewhere (``backend="remote"``), a ``RayVectorPortal``
for hosts that Ray places on a cluster's nodes (``backend="ray"``).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Optional, Union

from .agent.contract.base import PortalVectorEnv
from .agent.local.spec import EnvSpec
from .agent.portal_env import Portal
from .agent.vector import VectorPortal
from .cluster.backend import RayBackend
from .cluster.backend import option_names as ray_option_names
from .remote.client.backend import RemoteBackend
from .remote.client.backend import option_names as remote_option_names
from .runtimes.backend import Backend
from .runtimes.registry import backend_option_names, hosted_option_names, resolve_backend
from .tuning import PathOrDict, merge_tuning, resolve_tuning


def _spec(id: str, backend: Union[str, Backend], env_kwargs: Optional[dict], kwargs: dict) -> EnvSpec:
    """Split keyword arguments into the backend's options and the env's kwargs."""
    names = backend_option_names(backend)
    options = {key: kwargs.pop(key) for key in list(kwargs) if key in names}
    return EnvSpec(id, {**kwargs, **(env_kwargs or {})}, resolve_backend(backend, **options))


def _hosted(
    id: str,
    num_envs: int,
    backend: Union[str, RemoteBackend, RayBackend],
    vector_kwargs: Optional[dict],
    env_kwargs: Optional[dict],
    kwargs: dict,
) -> PortalVectorEnv:
    """Envs on env hosts (``"remote"``: started by hand; ``"ray"``: placed by Ray): options of the
    backend, then those of the hosts' runtime, then the env's."""
    ray = backend == "ray" or isinstance(backend, RayBackend)
    if isinstance(backend, (RemoteBackend, RayBackend)):
        hosted = backend
    else:
        cls, names = (RayBackend, ray_option_names()) if ray else (RemoteBackend, remote_option_names())
        hosted = cls(**{key: kwargs.pop(key) for key in list(kwargs) if key in names})
        names = hosted_option_names(hosted.runtime)
        picked = {key: kwargs.pop(key) for key in list(kwargs) if key in names}
        hosted = dataclasses.replace(hosted, runtime_options={**hosted.runtime_options, **picked})
    vector_kwargs = dict(vector_kwargs or {})
    copy = bool(vector_kwargs.pop("copy", True))
    env_kwargs = {**kwargs, **(env_kwargs or {})}
    if ray:
        from .cluster.vector import RayVectorPortal

        return RayVectorPortal(id, num_envs, hosted, env_kwargs, copy=copy, **vector_kwargs)
    from .remote.client.vector import RemoteVectorPortal

    return RemoteVectorPortal(id, num_envs, hosted, env_kwargs, copy=copy, **vector_kwargs)


def make_vec(
    id: str,
    num_envs: int = 1,
    *,
    backend: Union[str, Backend] = "process",
    vector_kwargs: Optional[dict] = None,
    env_kwargs: Optional[dict] = None,
    tune: Optional[PathOrDict] = None,
    **kwargs: Any,
) -> PortalVectorEnv:
    """Create ``num_envs`` copies of env ``id`` in isolated runtimes, batched as one ``PortalVectorEnv``
    (a ``VectorPortal`` for the local backends, a ``RemoteVectorPortal`` or ``RayVectorPortal`` for
    envs on hosts: the same contract, ``portal_shm.agent.contract.base``).

    ``id`` is a registered id (``"CartPole-v1"``, ``"ALE/Pong-v5"``: plugins are imported inside
    the runtime) or an entry point ``"package.module:callable"``. Keyword arguments named like an
    option of the backend (``python=`` for ``"process"``) configure the backend; all others go to
    the env's constructor inside its runtime (``env_kwargs={...}`` passes ones whose names clash).
    ``vector_kwargs`` go to ``VectorPortal`` (``autoreset_mode``, ``copy``, ``ring_depth``,
    ``envs_per_server``, ``step_timeout`` ...).

    ``tune`` applies what ``portal-shm tune ID -n N --write FILE`` measured best on this machine:
    the path of that file (or its dict, or ``load_tuning``'s result). Its ``vector_kwargs`` go
    under the explicit ``vector_kwargs`` (those win); a file tuned for another id or ``num_envs``
    raises ``TuningError`` (``portal_shm.tuning``).

    Raises:
        EnvNotFoundError: ``id`` is no registered env or entry point in the envs' runtime; the
            message says what was searched and what to do.
        EnvError: An env raised while it was made (the error is also the env's own type).
        ServerDiedError: An env server exited while starting; its log tail is in the message.
        PortalTimeoutError: The servers did not start within ``startup_timeout``.
        ProtocolMismatchError: A server speaks another protocol version (an image of another
            portal-shm: rebuild it).
        ConfigTooLargeError: A server's config (its env kwargs, mostly) is too large to hand over.
        HostPolicyError: An env host's operator does not allow the env, an option or a kwarg
            (``backend="remote"`` or ``"ray"``); the message names the flag that would.
        PortalError: The backend cannot start the envs: Docker unreachable or the image missing, an
            env host unreachable, no Ray node to place a host on, and the like.
        TuningError: ``tune`` was measured for another ``id`` or ``num_envs`` (also a ``ValueError``).
        ValueError: ``num_envs`` is not a positive integer, or a vector kwarg is out of its bounds
            (``TypeError`` for an unknown one).
    """
    if not isinstance(num_envs, int) or num_envs < 1:
        raise ValueError(f"num_envs must be a positive integer, got {num_envs!r}")
    if tune is not None:
        vector_kwargs = merge_tuning(resolve_tuning(tune, id, num_envs), vector_kwargs)
    if backend in ("remote", "ray") or isinstance(backend, (RemoteBackend, RayBackend)):
        return _hosted(id, num_envs, backend, vector_kwargs, env_kwargs, kwargs)
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
