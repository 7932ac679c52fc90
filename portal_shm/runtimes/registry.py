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
BACKENDS: dict[str, type] = {
    "process": ProcessBackend,
    "docker": DockerBackend,
    "attach": AttachBackend,
    "venv": VenvBackend,
    "micromamba": MicromambaBackend,
}


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
