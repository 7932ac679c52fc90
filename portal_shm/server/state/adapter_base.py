"""What every base env adapter is (``Adapter``: its defaults are the fallbacks'), and how an
adapter's ``save`` refuses a base env whose state it cannot carry (``refusing``)."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Callable, Iterator

from .plain import StateError


class Adapter:
    """A class of static methods: ``name`` (in the blob's header), ``packages`` (whose versions its
    states depend on beside the chain's), ``matches`` (whether it knows a base env's state: the
    fallbacks, ``PickledEnv`` and ``EpisodeEndState``, take any), ``save`` and ``load``."""

    name = ""
    packages: tuple = ()

    @staticmethod
    def matches(base: Any) -> bool:
        return True

    @staticmethod
    def save(base: Any, resets_next: bool) -> Any:
        raise NotImplementedError

    @staticmethod
    def load(base: Any, payload: Any) -> None:
        raise NotImplementedError


@contextmanager
def refusing(errors: Any, message: Callable[[Exception], str]) -> Iterator[None]:
    """What ``errors`` interrupt as a ``StateError`` saying ``message(exc)``; the error's own
    traceback is dropped (it points into the env, and the message says what to change)."""
    try:
        yield
    except errors as exc:
        raise StateError(message(exc)) from None
