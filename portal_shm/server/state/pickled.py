"""The opt-in fallback adapter: the base env pickled inside its runtime."""

from __future__ import annotations

import pickle
from typing import Any

from .plain import StateError, _class_name


class PickledEnv:
    """The opt-in fallback: the base env pickled, and unpickled only in an env runtime that was
    told to (``allow_pickle``): unpickling runs whatever the blob says. Never on the agent side."""

    name = "pickle"
    packages: tuple = ()  # what its states depend on beside the chain's

    @staticmethod
    def matches(base: Any) -> bool:
        return True

    @staticmethod
    def save(base: Any, resets_next: bool) -> Any:
        try:
            return pickle.dumps(base)
        except Exception as exc:
            raise StateError(
                f"{_class_name(base)} cannot be pickled ({type(exc).__name__}: {exc}): give the env "
                "get_state()/set_state(state) methods that return and take plain data"
            ) from None

    @staticmethod
    def load(base: Any, payload: Any) -> None:
        vars(base).update(vars(pickle.loads(payload)))
