"""The adapter for any other env, only at an episode's end: its generators, as its reset draws from them."""

from __future__ import annotations

from typing import Any

from .adapter_base import Adapter
from .plain import _RNG_ATTRIBUTES, StateError, _attrs, _class_name, _decode, _encode, _is_generator
from .wrappers import _SKIP


class EpisodeEndState(Adapter):
    """Any other env, only at an episode's end (its next move is a reset, not yet made).

    There, a gymnasium env's future is its reset and what follows, and it draws all of that from
    its generators: ``np_random`` (which every state carries, ``_rng_state``) and any numpy or
    ``random.Random`` generator it holds as an attribute of its own (saved here). Its wrappers
    travel as in every state, and so does the pending autoreset. Its dynamic state (positions, a
    physics world, a game engine) is not here, and does not matter since the reset rebuilds it:
    ``capture`` takes this only at an episode's end, and ``restore`` refuses one that claims
    another moment. What it cannot know: randomness drawn from anywhere else (numpy's or
    ``random``'s global generators, an engine's own RNG that its reset does not reseed, counters
    kept across episodes by the base env)."""

    name = "episode-end"

    @staticmethod
    def save(base: Any, resets_next: bool) -> Any:
        name = type(base).__qualname__
        generators = {
            key: _encode(value, f"{name}.{key}")
            for key, value in _attrs(base).items()
            if key not in _RNG_ATTRIBUTES and _is_generator(value)
        }
        return {"generators": generators}

    @staticmethod
    def load(base: Any, payload: Any) -> None:
        generators = payload.get("generators") if isinstance(payload, dict) else None
        if not isinstance(generators, dict):
            raise StateError(f"an episode-end state for {_class_name(base)} without its generators")
        decoded = {key: _decode(value) for key, value in generators.items()}
        for key, value in decoded.items():
            named = isinstance(key, str) and key.isidentifier() and not key.startswith("__")
            if not named or key in _SKIP or key in _RNG_ATTRIBUTES:
                raise StateError(f"the state sets {key!r:.60} on {_class_name(base)}, which a state of it never holds")
            current = _attrs(base).get(key, getattr(type(base), key, None))
            if not _is_generator(value) or not (current is None or _is_generator(current)):
                raise StateError(
                    f"the state sets {key!r:.60} on {_class_name(base)} to something other than a generator, "
                    "which an episode-end state never holds"
                )
        for key, value in decoded.items():
            setattr(base, key, value)
