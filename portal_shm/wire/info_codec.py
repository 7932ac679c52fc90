"""Infos on their way to the agent: carried exactly, or refused by name, never changed silently.

SyncVectorEnv keeps whatever an env puts in its infos. msgpack (``protocol.py``) represents numbers,
strings, bytes, lists, dicts, tuples and numeric numpy values exactly; for anything else (enum
members, namedtuples, sets, dataclasses, object or datetime64 arrays...) a server does what the
agent told it at start (``config["infos"]``, one of ``MODES``):

- ``PICKLE``: its runtime is no trust boundary (process, venv, micromamba: the agent's user runs
  the agent's env code), so such a value travels pickled, alone, in a msgpack extension
  (``protocol.EXT_PICKLE``) that the agent loads from these servers only.
- ``REFUSE``: across a trust boundary (a container, a listener) the agent never unpickles, so the
  step fails with ``InfoRefused``, naming the env, the value's key path and its type.
- ``LOSSY``: the agent opted in (``VectorOptions.infos="lossy"``): an enum member becomes its
  value, another subclass of a plain type that type (a namedtuple a tuple), anything else its
  ``repr()``.

The common case costs what it did: the packer handles exact types in C and calls back only for
numpy values, tuples and what it cannot represent. A refusal names its value by walking the infos
again, off the hot path. Env side: Python 3.9, numpy and msgpack only.
"""

from __future__ import annotations

import dataclasses
import enum
import pickle
from typing import Any, Callable, Optional

import msgpack
import numpy as np

from .dtypes import MESSAGE_KINDS, allowed
from .protocol import EXT_PICKLE, KIND_INFO_ENCODING, new_packer, numpy_ext, packb, tuple_ext, unpackb

PICKLE, REFUSE, LOSSY = "pickle", "refuse", "lossy"
MODES = (PICKLE, REFUSE, LOSSY)
# The causes an ``InfoRefused`` names: a trust boundary (REFUSE), a value pickle cannot take
# (PICKLE), and on the agent a pickle it cannot load.
BOUNDARY, NOT_PICKLABLE, NOT_UNPICKLABLE = "boundary", "pickle", "unpickle"
PICKLE_PROTOCOL = 4  # read by every Python either side may run (3.9 on)
_NATIVE = frozenset((int, float, str, bytes, bool, type(None), list, dict))  # packed by msgpack itself
_WALK_DEPTH = 64  # a refusal's walk gives up naming deeper values (msgpack stops at 512 anyway)


class InfoRefused(TypeError):
    """An env's info value that this server may not send as it is. ``detail`` is what its error
    message carries (``server/errors.py``'s ``error_message``), so that the agent raises an
    ``InfoEncodingError`` instead of counting an env failure: the env did nothing wrong."""

    def __init__(self, env_index: Optional[int], key: str, what: str, hint: str, cause: str, reason: str = "") -> None:
        self.env_index = env_index
        self.detail = {
            "kind": KIND_INFO_ENCODING,
            "key": key,
            "what": what,
            "hint": hint,
            "cause": cause,
            "reason": reason,
        }
        why = {
            BOUNDARY: "cannot cross a trust boundary exactly",
            NOT_PICKLABLE: f"cannot be pickled ({reason})",
        }.get(cause, reason)
        super().__init__(f"env {env_index}'s {key} is {what}, which {why}; {hint}")


class _Inexact(Exception):
    """Raised by a packer's hook for a value it may not send (``value``), to be named by a walk."""

    def __init__(self, value: Any, reason: str = "") -> None:
        self.value = value
        self.reason = reason


def _exact_numpy(obj: Any) -> bool:
    """A numpy array or scalar (of numpy's own types) whose dtype msgpack messages carry."""
    kind = type(obj)
    if kind is np.ndarray:
        return allowed(obj.dtype, MESSAGE_KINDS)
    return isinstance(obj, np.generic) and kind is obj.dtype.type and allowed(obj.dtype, MESSAGE_KINDS)


class _Packing:
    """One mode's msgpack hook: exact types as ``protocol`` packs them, the rest as ``mode`` says."""

    def __init__(self, mode: str) -> None:
        if mode not in MODES:
            raise ValueError(f"infos mode {mode!r}: one of {', '.join(MODES)}")
        self.mode = mode

    def pack(self, value: Any) -> bytes:
        return new_packer(self.default).pack(value)  # type: ignore[no-any-return]

    def default(self, obj: Any) -> Any:
        kind = type(obj)
        if kind is tuple:
            return tuple_ext(self.pack(list(obj)))
        if _exact_numpy(obj):
            return numpy_ext(obj)
        if self.mode == PICKLE:
            try:
                return msgpack.ExtType(EXT_PICKLE, pickle.dumps(obj, PICKLE_PROTOCOL))
            except Exception as exc:
                raise _Inexact(obj, f"{type(exc).__name__}: {exc}") from None
        if self.mode == LOSSY:
            value = lossy(obj)
            return value if type(value) in _NATIVE else self.default(value)
        raise _Inexact(obj)


def lossy(obj: Any) -> Any:
    """What ``LOSSY`` sends for ``obj``: an enum member's value, a plain type's subclass as that
    type (a namedtuple as a tuple, an ndarray subclass as an ndarray), anything else its repr()."""
    if isinstance(obj, enum.Enum):
        return obj.value
    if isinstance(obj, np.ndarray) and allowed(obj.dtype, MESSAGE_KINDS):
        return np.asarray(obj)
    base: type[Any]  # declared, never evaluated: each takes its own subclasses
    for base in (int, float, str, bytes, tuple, list, dict):
        if isinstance(obj, base):
            return base(obj)
    return repr(obj)


_PACKINGS = {mode: _Packing(mode) for mode in MODES}


class InfoCodec:
    """How one server encodes its envs' infos rows (``mode``: what the agent said at start)."""

    def __init__(self, mode: str) -> None:
        self.packing = _PACKINGS[mode] if mode in _PACKINGS else _Packing(mode)
        self.mode = mode

    def entry(
        self, env_index: int, infos: list[Any], obs: Any = None, columns: Optional[dict[str, Any]] = None
    ) -> bytes:
        """One env's row: ``[infos, variable-layout observation, (columns)]``. Only ``infos`` go by
        this codec's rules; observations and a native batch's columns as ``protocol`` packs them
        (their space says what they are)."""
        if obs is None and columns is None:
            try:
                return self.packing.pack([infos, None])
            except (_Inexact, OverflowError, ValueError):
                return b"\x92" + self.infos(env_index, infos) + b"\xc0"
        parts = [b"\x92" if columns is None else b"\x93", self.infos(env_index, infos), packb(obs)]
        if columns is not None:
            parts.append(packb(columns))
        return b"".join(parts)

    def infos(self, env_index: Optional[int], infos: list[Any]) -> bytes:
        """``infos`` (a list of info dicts) packed, or ``InfoRefused`` naming the value that cannot go."""
        try:
            return self.packing.pack(infos)
        except _Inexact as exc:
            failed: Any = exc
        except (OverflowError, ValueError) as exc:  # an int past 64 bits, nesting past msgpack's limit
            failed = exc
        if self.mode == PICKLE:
            if isinstance(failed, _Inexact):
                target = failed.value
                path, value = _find(infos, lambda value, batched: value is target) or ("infos", target)
                raise _refusal(env_index, path, value, NOT_PICKLABLE, failed.reason)
            try:  # what msgpack cannot take at all (a huge int) goes as one pickle of the whole list
                return packb(msgpack.ExtType(EXT_PICKLE, pickle.dumps(infos, PICKLE_PROTOCOL)))
            except Exception as exc:
                raise InfoRefused(env_index, "infos", "a value", _PLAIN_HINT, NOT_PICKLABLE, str(exc)) from None
        if self.mode == LOSSY:
            try:
                return self.packing.pack(_huge_ints_as_text(infos))
            except (_Inexact, OverflowError, ValueError) as exc:
                raise InfoRefused(env_index, "infos", "a value", _PLAIN_HINT, BOUNDARY, str(exc)) from None
        found = _find(infos, _inexact_at)
        if found is not None:
            raise _refusal(env_index, found[0], found[1], BOUNDARY)
        # Only subclasses that batching turns into their base anyway (an OrderedDict of infos, a
        # masked array): SyncVectorEnv's infos hold the plain dict or array, so they cross as one.
        try:
            return self.packing.pack(_plain_chain(infos))
        except (_Inexact, OverflowError, ValueError) as exc:
            raise InfoRefused(env_index, "infos", "a value", _PLAIN_HINT, BOUNDARY, str(exc)) from None


def check_crossing(env_index: Optional[int], info: dict[Any, Any], lossy_infos: bool) -> dict[Any, Any]:
    """``info`` as it may cross a trust boundary (an env host's to its agent): unchanged when
    msgpack carries it exactly, converted when ``lossy_infos``, else ``InfoRefused``."""
    try:
        _PACKINGS[REFUSE].pack(info)
        return info
    except (_Inexact, OverflowError, ValueError):
        pass
    if lossy_infos:
        converted: dict[Any, Any] = unpackb(_PACKINGS[LOSSY].pack(info))
        return converted
    InfoCodec(REFUSE).infos(env_index, [info])
    return info  # (batching's subclasses alone: they cross as their base)


# -- naming a refused value ----------------------------------------------------------------------
_PLAIN_HINT = "send plain data (numbers, strings, bytes, lists, tuples, dicts, numeric numpy arrays)"


def _inexact_at(value: Any, batched: bool) -> bool:
    """Whether msgpack cannot carry ``value`` exactly where it sits; ``batched``: on the chain of
    dicts from the info's root, where gymnasium batches: a dict or numeric ndarray subclass there
    becomes its base type in SyncVectorEnv's infos too."""
    kind = type(value)
    if kind in _NATIVE:
        return kind is int and not -(2**63) <= value < 2**64
    if kind is tuple or _exact_numpy(value):
        return False
    if batched and isinstance(value, np.ndarray):
        return not allowed(value.dtype, MESSAGE_KINDS)
    return not (batched and isinstance(value, dict))


def _find(infos: list[Any], hit: Callable[[Any, bool], bool]) -> Optional[tuple[str, Any]]:
    """(key path such as ``infos['stats']['when']``, value) of the first value of ``infos`` that
    ``hit(value, batched)``; dict keys are looked at too."""
    for info in infos:
        found = _walk(info, "infos", hit, True, 0)
        if found is not None:
            return found
    return None


def _walk(
    value: Any, path: str, hit: Callable[[Any, bool], bool], batched: bool, depth: int
) -> Optional[tuple[str, Any]]:
    if depth > _WALK_DEPTH:
        return None
    kind = type(value)
    if kind is dict or (batched and isinstance(value, dict)):
        for key, item in value.items():
            where = f"{path}[{_short(key)}]"
            if hit(key, False):
                return f"{where} (its key)", key
            found = _walk(item, where, hit, batched, depth + 1)
            if found is not None:
                return found
        return None
    if kind is list or kind is tuple:
        for index, item in enumerate(value):
            found = _walk(item, f"{path}[{index}]", hit, False, depth + 1)
            if found is not None:
                return found
        return None
    return (path, value) if hit(value, batched) else None


def _plain_chain(value: Any) -> Any:
    """``value`` with the dicts and arrays on its dicts' chain as their plain base types."""
    if isinstance(value, list):
        return [_plain_chain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain_chain(v) for k, v in value.items()}
    if isinstance(value, np.ndarray) and type(value) is not np.ndarray:
        return np.asarray(value)
    return value


def _huge_ints_as_text(value: Any) -> Any:
    """``LOSSY``'s ints past 64 bits: their repr(), as any other value msgpack cannot carry."""
    kind = type(value)
    if kind is int and not -(2**63) <= value < 2**64:
        return repr(value)
    if kind is list or kind is tuple:
        return kind(_huge_ints_as_text(v) for v in value)
    if kind is dict:
        return {k: _huge_ints_as_text(v) for k, v in value.items()}
    return value


def _short(key: Any) -> str:
    text = repr(key)
    return text if len(text) <= 60 else text[:57] + "..."


def _refusal(env_index: Optional[int], path: str, value: Any, cause: str, reason: str = "") -> InfoRefused:
    return InfoRefused(env_index, path, describe(value), hint(value), cause, reason)


def _qualified(kind: type) -> str:
    module = kind.__module__
    return kind.__qualname__ if module == "builtins" else f"{module}.{kind.__qualname__}"


def describe(value: Any) -> str:
    """What ``value`` is, for an error: ``an enum.IntEnum (nle.StepStatus)``, ``a set``..."""
    kind = type(value)
    if isinstance(value, enum.Enum):
        base = next(b for b in (enum.IntFlag, enum.IntEnum, enum.Flag, enum.Enum) if isinstance(value, b))
        return f"an enum.{base.__name__} ({_qualified(kind)})"
    if isinstance(value, tuple) and hasattr(kind, "_fields"):
        return f"a namedtuple ({_qualified(kind)})"
    if dataclasses.is_dataclass(value):
        return f"a dataclass ({_qualified(kind)})"
    if isinstance(value, np.ndarray):
        array = "a numpy array" if kind is np.ndarray else f"a {_qualified(kind)} array"
        return f"{array} of dtype {value.dtype}"
    if isinstance(value, np.generic):
        return f"a {_qualified(kind)} scalar"
    if kind is int:
        return "an int beyond 64 bits"
    name = _qualified(kind)
    return f"{'an' if name[:1].lower() in 'aeiou' else 'a'} {name}"


def hint(value: Any) -> str:
    """How the env can send ``value`` plainly instead."""
    if isinstance(value, enum.Enum):
        return "send int(value) (or value.value, value.name) instead"
    if isinstance(value, tuple) and hasattr(type(value), "_fields"):
        return "send tuple(value) or value._asdict() instead"
    if dataclasses.is_dataclass(value):
        return "send dataclasses.asdict(value) instead"
    if isinstance(value, (set, frozenset)):
        return "send sorted(value) or list(value) instead"
    dtype = getattr(value, "dtype", None)
    if isinstance(dtype, np.dtype) and dtype.kind in "Mm":
        return "send value.astype('int64') (its unit in the key's name) or str(value) instead"
    if isinstance(dtype, np.dtype) and dtype.kind == "O":
        return "send value.tolist() or an array of a numeric dtype instead"
    if type(value) is int:
        return "send str(value) or float(value) instead"
    return _PLAIN_HINT + " instead"
