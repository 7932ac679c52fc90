"""What the agent asks for: which env, with which arguments, in which runtime."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from .backend import Backend
from .process_backend import ProcessBackend


@dataclass(frozen=True)
class EnvSpec:
    """One env of a VectorPortal.

    ``id`` is a registered gymnasium (or legacy gym) id, plugin ids such as ``ALE/Pong-v5``
    included, or an entry point ``"package.module:callable"``; ``kwargs`` go to ``make``/the
    callable inside the env's runtime. ``legacy`` forces (True) or forbids (False) the pre-0.26
    gym adapter; None detects it.
    """

    id: str
    kwargs: dict = field(default_factory=dict)
    backend: Backend = field(default_factory=ProcessBackend)
    legacy: Optional[bool] = None

    def to_config(self) -> dict[str, Any]:
        return {"id": self.id, "kwargs": dict(self.kwargs), "legacy": self.legacy}

    def shares_server_with(self, other: "EnvSpec") -> bool:
        return (self.id, self.legacy, self.backend.key()) == (other.id, other.legacy, other.backend.key()) and (
            self.kwargs == other.kwargs
        )
