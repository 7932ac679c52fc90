"""The opt-in fallback adapter: the base env pickled inside its runtime."""

from __future__ import annotations

import pickle
from typing import Any

from .adapter_base import Adapter, refusing
from .plain import _class_name


class PickledEnv(Adapter):
    """The opt-in fallback: the base env pickled, and unpickled only in an env runtime that was
    told to (``allow_pickle``): unpickling runs whatever the blob says. Never on the agent side."""

    name = "pickle"

    @staticmethod
    def save(base: Any, resets_next: bool) -> Any:
        with refusing(Exception, lambda exc: _not_picklable(base, exc)):
            return pickle.dumps(base)

    @staticmethod
    def load(base: Any, payload: Any) -> None:
        vars(base).update(vars(pickle.loads(payload)))


def _not_picklable(base: Any, exc: Exception) -> str:
    return (
        f"{_class_name(base)} cannot be pickled ({type(exc).__name__}: {exc}): give the env "
        "get_state()/set_state(state) methods that return and take plain data"
    )
