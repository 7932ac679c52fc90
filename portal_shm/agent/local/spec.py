"""What the agent asks for: which env, with which arguments, in which runtime."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Sequence

from ...runtimes.backend import Backend
from ...runtimes.process import ProcessBackend


@dataclass(frozen=True)
class EnvSpec:
    """One env of a VectorPortal.

    ``id`` is a registered gymnasium (or legacy gym) id, plugin ids such as ``ALE/Pong-v5``
    included, or an entry point ``"package.module:callable"``; ``kwargs`` go to ``make``/the
    callable inside the env's runtime. ``legacy`` forces (True) or forbids (False) the pre-0.26
    gym adapter; None detects it. ``factory``, when given, is a callable of the agent that makes
    the env (as in gymnasium's ``AsyncVectorEnv(env_fns)``): it is shipped to the runtime with
    cloudpickle and ``id`` only names it in messages (see ``portal_shm.agent.local.env_fns``).
    ``wrappers``: callables applied in turn to each env inside its runtime (``wrapper(env)``, as
    ``gymnasium.make_vec(wrappers=...)``), shipped with cloudpickle as factories are, so only to
    runtimes that take factories (the ``process`` and ``venv`` backends).
    """

    id: str
    kwargs: dict[str, Any] = field(default_factory=dict)
    backend: Backend = field(default_factory=ProcessBackend)
    legacy: Optional[bool] = None
    factory: Optional[Callable[[], Any]] = None
    wrappers: Sequence[Callable[[Any], Any]] = ()

    def to_config(self) -> dict[str, Any]:
        return {"id": self.id, "kwargs": dict(self.kwargs), "legacy": self.legacy}

    def shares_server_with(self, other: "EnvSpec") -> bool:
        if tuple(self.wrappers) != tuple(other.wrappers):
            return False
        if self.factory is not None or other.factory is not None:  # each env has its own factory
            return (
                self.factory is not None
                and other.factory is not None
                and self.legacy == other.legacy
                and self.backend.key() == other.backend.key()
            )
        return (self.id, self.legacy, self.backend.key()) == (other.id, other.legacy, other.backend.key()) and (
            self.kwargs == other.kwargs
        )
