"""The adapter for envs with ``get_state()``/``set_state(state)`` of their own."""

from __future__ import annotations

import inspect
from typing import Any, Callable

from .adapter_base import Adapter, refusing
from .plain import _class_name, _decode, _encode, _NotPlain
from .wrappers import _own_methods


class OwnState(Adapter):
    """Envs with ``get_state()``/``set_state(state)`` of their own: they know their state best."""

    name = "own"

    @staticmethod
    def matches(base: Any) -> bool:
        return _own_methods(base) and _one_argument(type(base).set_state)

    @staticmethod
    def save(base: Any, resets_next: bool) -> Any:
        with refusing(_NotPlain, lambda exc: _not_plain(base, exc)):
            return _encode(base.get_state(), f"{type(base).__qualname__}.get_state()")

    @staticmethod
    def load(base: Any, payload: Any) -> None:
        base.set_state(_decode(payload))


def _not_plain(base: Any, exc: Exception) -> str:
    return (
        f"{_class_name(base)}.get_state() returned {exc.args[0]}, which a state cannot carry: "
        "return plain data (numbers, strings, bytes, arrays, lists, tuples, dicts)"
    )


def _one_argument(method: Callable) -> bool:
    """``set_state(state)``, not e.g. MujocoEnv's ``set_state(qpos, qvel)``."""
    try:
        params = list(inspect.signature(method).parameters.values())[1:]
    except (TypeError, ValueError):
        return True
    required = [p for p in params if p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return len(required) <= 1 and (len(params) >= 1 or any(p.kind is p.VAR_POSITIONAL for p in params))
