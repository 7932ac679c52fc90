"""The backends by name: what ``backend="process"`` (or ``"docker"``, ...) means, and which keyword
arguments of ``make_vec`` are a backend's options rather than the env's.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Union

from ..errors import PortalError
from .attach import AttachBackend
from .backend import Backend
from .docker import DockerBackend
from .micromamba import MicromambaBackend
from .process import ProcessBackend
from .venv import VenvBackend

# Backend name -> class; each class is a dataclass whose fields are its options.
BACKENDS: dict[str, type[Backend]] = {
    "process": ProcessBackend,
    "docker": DockerBackend,
    "attach": AttachBackend,
    "venv": VenvBackend,
    "micromamba": MicromambaBackend,
}


def register_backend(cls: type[Backend]) -> type[Backend]:
    """Make ``backend=cls.name`` mean ``cls`` for ``make_vec`` and, where ``cls`` declares
    ``agent_options``, for env hosts (``portal-shm host --runtimes``): the one step a new backend
    takes outside its own module. ``cls`` is a dataclass whose fields are its options; usable as a
    class decorator."""
    if not (isinstance(cls, type) and issubclass(cls, Backend) and dataclasses.is_dataclass(cls)):
        raise TypeError(f"{cls!r} is not a dataclass subclass of Backend")
    if cls.name in ("remote", "ray") or BACKENDS.get(cls.name, cls) is not cls:
        raise ValueError(f"backend name {cls.name!r} is taken")
    BACKENDS[cls.name] = cls
    return cls


def backend_option_names(backend: Union[str, Backend]) -> set:
    if isinstance(backend, Backend):
        return set()
    cls = BACKENDS.get(backend)
    return _field_names(cls) if cls is not None else set()


def _field_names(cls: type) -> set:
    """A backend's options: the fields of its dataclass (``register_backend`` checked it is one)."""
    return {field.name for field in dataclasses.fields(cls)}


def hosted_runtimes() -> tuple[str, ...]:
    """The backends env hosts may run for agents: those that declare ``agent_options``."""
    return tuple(name for name, cls in BACKENDS.items() if cls.agent_options is not None)


def hosted_option_names(runtime: str) -> set:
    """The keyword arguments of ``make_vec(backend="remote"/"ray", runtime=...)`` that go to the
    hosts' runtime: its agent options, and its other fields too, so that a host refuses those by
    name (they are its operator's) instead of the env receiving them."""
    cls = BACKENDS.get(runtime)
    if cls is None or cls.agent_options is None:
        raise ValueError(f"runtime={runtime!r}: hosts run envs on {', '.join(hosted_runtimes())}")
    return backend_option_names(runtime) | set(cls.agent_options)


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
