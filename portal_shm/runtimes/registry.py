"""The backends by name: what ``backend="process"`` (or ``"docker"``, ...) means, and which keyword
arguments of ``make_vec`` are a backend's options rather than the env's.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Union

from ..errors import PortalError, did_you_mean
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


#: The backends ``make_vec`` knows beyond these: envs on hosts elsewhere, and hosts Ray places.
HOSTED_BACKENDS = ("remote", "ray")


def backend_names() -> list[str]:
    """Every name ``backend=`` takes: the registered backends, then ``"remote"`` and ``"ray"``."""
    return [*BACKENDS, *HOSTED_BACKENDS]


def register_backend(cls: type[Backend]) -> type[Backend]:
    """Make ``backend=cls.name`` mean ``cls`` for ``make_vec`` and, where ``cls`` declares
    ``agent_options``, for env hosts (``portal-shm host --runtimes``): the one step a new backend
    takes outside its own module. ``cls`` is a dataclass whose fields are its options; usable as a
    class decorator."""
    if not (isinstance(cls, type) and issubclass(cls, Backend) and dataclasses.is_dataclass(cls)):
        raise TypeError(f"{cls!r} is not a dataclass subclass of Backend")
    if cls.name in HOSTED_BACKENDS or BACKENDS.get(cls.name, cls) is not cls:
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
        raise ValueError(
            f"runtime={runtime!r}: hosts run envs on {', '.join(hosted_runtimes())}"
            + did_you_mean(runtime, hosted_runtimes())
        )
    return backend_option_names(runtime) | set(cls.agent_options)


def resolve_backend(backend: Union[str, Backend], **options: Any) -> Backend:
    """A Backend instance from its name (``"process"``, ...) and options, or the instance itself."""
    if isinstance(backend, Backend):
        if options:
            raise TypeError(f"options {sorted(options)} apply to a backend name, not to a Backend instance")
        return backend
    return backend_class(backend)(**options)


def backend_class(backend: Any) -> type[Backend]:
    """The class ``backend=NAME`` names; a ``PortalError`` naming the backends (and the one ``NAME`` is
    close to) for another name."""
    cls = BACKENDS.get(backend) if isinstance(backend, str) else None
    if cls is None and backend in HOSTED_BACKENDS:
        raise PortalError(
            f"backend {backend!r} runs the envs on env hosts, which portal_shm.make_vec(id, n, backend={backend!r}) "
            f"reaches; here a local runtime is needed: one of {', '.join(BACKENDS)}"
        )
    if cls is None:
        raise PortalError(
            f"unknown backend {backend!r}{did_you_mean(backend, backend_names())} "
            f"(available: {', '.join(backend_names())})"
        )
    return cls
