"""Plain data: what a state carries, as msgpack-able values, and the generators among them.

Values are copied on the way out (arrays, deques, numpy and ``random`` generators tagged as tuples
msgpack carries) and rebuilt on the way in; anything else raises ``_NotPlain`` naming where in
the value it sits, which the caller turns into a ``StateError`` naming the wrapper or env.
"""

from __future__ import annotations

import collections
import random
from typing import Any

import numpy as np

_TAG = "\x00portal-shm"  # first item of the tuples that stand for values msgpack has no type for
_RNG_ATTRIBUTES = ("_np_random", "np_random")  # the base env's generator, carried by ``_rng_state``


class StateError(Exception):
    """A state that cannot be taken or restored here; the message says why and what would work."""


class _NotPlain(Exception):
    """A value with no plain-data encoding; ``args[0]`` says where in the value it sits."""


def _attrs(obj: Any) -> dict:
    """The instance's own attributes: never ``getattr``, which legacy gym wrappers forward inward."""
    return getattr(obj, "__dict__", None) or {}


def _class_name(obj: Any) -> str:
    return f"{type(obj).__module__}.{type(obj).__qualname__}"


def _encode(value: Any, where: str) -> Any:
    """``value`` as msgpack-able data (a copy: arrays are copied, deques and generators tagged)."""
    if value is None or isinstance(value, (bool, float, str, bytes, np.generic)):
        return value
    if isinstance(value, int):
        return value if -(2**63) <= value < 2**63 else (_TAG, "int", str(value))  # PCG64's 128-bit state
    if isinstance(value, np.ndarray):
        if value.dtype.hasobject:
            raise _NotPlain(f"{where} (an array of Python objects)")
        return value.copy()
    if isinstance(value, collections.deque):
        items = [_encode(v, f"{where}[{i}]") for i, v in enumerate(value)]
        return (_TAG, "deque", items, value.maxlen)
    if isinstance(value, tuple):
        return tuple(_encode(v, f"{where}[{i}]") for i, v in enumerate(value))
    if isinstance(value, list):
        return [_encode(v, f"{where}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, dict):
        if not all(isinstance(k, (str, int)) for k in value):
            raise _NotPlain(f"{where} (a dict with keys other than strings and ints)")
        return {k: _encode(v, f"{where}[{k!r}]") for k, v in value.items()}
    if isinstance(value, np.random.Generator):
        return (_TAG, "generator", _encode(value.bit_generator.state, where))
    if isinstance(value, np.random.RandomState):
        return (_TAG, "randomstate", _encode(value.get_state(legacy=False), where))
    if type(value) is random.Random:  # (not SystemRandom, which has no state)
        return (_TAG, "random", _encode(value.getstate(), where))
    raise _NotPlain(f"{where} (a {_class_name(value)})")


_BIT_GENERATORS = frozenset({"PCG64", "PCG64DXSM", "MT19937", "Philox", "SFC64"})


def _decode(value: Any) -> Any:
    if isinstance(value, tuple) and len(value) >= 2 and isinstance(value[0], str) and value[0] == _TAG:
        kind = value[1]
        if kind == "int":
            return int(value[2])
        if kind == "deque":
            return collections.deque([_decode(v) for v in value[2]], maxlen=value[3])
        if kind == "generator":
            state = _decode(value[2])
            if state.get("bit_generator") not in _BIT_GENERATORS:
                raise StateError(f"a state names the bit generator {state.get('bit_generator')!r:.40}, not numpy's")
            generator = np.random.Generator(getattr(np.random, state["bit_generator"])())
            generator.bit_generator.state = state
            return generator
        if kind == "randomstate":
            random_state = np.random.RandomState()
            random_state.set_state(_decode(value[2]))
            return random_state
        if kind == "random":
            generator = random.Random()
            try:
                generator.setstate(_decode(value[2]))
            except (TypeError, ValueError) as exc:
                raise StateError(f"a state holds a random.Random state that Python refuses: {exc}") from None
            return generator
        raise StateError(f"a state value of unknown kind {kind!r}: a newer portal-shm made it")
    if isinstance(value, tuple):
        return tuple(_decode(v) for v in value)
    if isinstance(value, list):
        return [_decode(v) for v in value]
    if isinstance(value, dict):
        return {k: _decode(v) for k, v in value.items()}
    return value


_GENERATORS = (np.random.Generator, np.random.RandomState, random.Random)


def _is_generator(value: Any) -> bool:
    return isinstance(value, _GENERATORS) and not isinstance(value, random.SystemRandom)


def _rng_state(base: Any) -> Any:
    """The base env's generator and seed (gymnasium: ``_np_random``, created lazily; old gym:
    ``np_random``, a RandomState), read without creating one."""
    own = _attrs(base)
    rng = own.get("_np_random", own.get("np_random"))
    if rng is None:
        return None
    try:
        return {"np_random": _encode(rng, "np_random"), "seed": own.get("_np_random_seed")}
    except _NotPlain:
        return None  # not a numpy generator (an env's own object): its adapter carries it


def _restore_rng(base: Any, saved: Any) -> None:
    """The generator back, and gymnasium's ``np_random_seed`` beside it (a fresh env that was
    never reset holds it only as its class's default, not as an attribute of its own)."""
    own = _attrs(base)
    name = "_np_random" if "_np_random" in own or "np_random" not in own else "np_random"
    rng = _decode(saved["np_random"])
    if not _is_generator(rng):
        raise StateError(f"a state's generator for {_class_name(base)} is not a generator")
    setattr(base, name, rng)
    seed = saved.get("seed")
    if isinstance(seed, int) and ("_np_random_seed" in own or hasattr(type(base), "_np_random_seed")):
        setattr(base, "_np_random_seed", seed)
