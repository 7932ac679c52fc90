"""Wire format of the control plane: msgpack with explicit numpy encoding, never pickle.

Both sides import this module, so it must stay importable on Python 3.9 with numpy 1.x and
nothing beyond numpy and msgpack. Decoding is written for untrusted input: an env runtime can
send anything, and the worst it may cause in the agent is a ``ProtocolError``. The one exception,
``unpackb(..., unpickle=True)``, is for the infos of servers whose runtime is no trust boundary
(``info_codec.py``): what msgpack cannot carry exactly comes from them pickled (``EXT_PICKLE``).
"""

from __future__ import annotations

import pickle
import threading
from typing import Any, Callable

import msgpack
import numpy as np

from .dtypes import MESSAGE_KINDS, allowed, safe_dtype

PROTOCOL_VERSION = 1

# Control message kinds (the "cmd" field).
HELLO = "hello"
ATTACH = "attach"
READY = "ready"
RESET = "reset"
CALL = "call"
SET_ATTR = "set_attr"
RENDER = "render"
GET_STATE = "get_state"
SET_STATE = "set_state"
RECORD = "record"  # {"envs": [env indices], "on": bool, "frames"?: per env a frame ring to fetch (frames.py) or None}
CLOSE = "close"
RESUME = "resume"  # to a server holding after it retired (CMD_RETIRE): it is not swapped now, it goes on
REPLY = "reply"
ERROR = "error"
EXTRA = "extra"
ACTIONS = "actions"  # per-env actions of spaces without a fixed layout, sent just before a step

# What a server's handshake says of its envs' states ("states"; absent from older servers): every
# env's can be taken at any moment (an adapter knows it), or some env's only at an episode's end,
# where its generators are its state (``server/state/``): recycling swaps that server only then.
STATES_COMPLETE = "complete"
STATES_AT_EPISODE_END = "episode-end"

# Mailbox commands written into shared memory before the server's go bell is rung.
CMD_NONE = 0
CMD_STEP = 1
CMD_CONTROL = 2
CMD_STEP_ACTIONS = 3  # a step whose actions come in an ACTIONS message instead of the ring
# Added to a step command (recycling): if every env of the server ends its episode in this step, the
# server sends their states beside it (EXTRA with "states") and holds: it reads only its control
# socket until it gets CLOSE (it is swapped) or RESUME; otherwise a plain step.
CMD_RETIRE = 8
# Added to a step command by an agent that watches its status word after a ring (servers that say
# ``ring_early`` in their hello know it): the server sets its status WRITING and rings as soon as
# its envs have stepped, then writes the results. The agent's wake-up, tens of microseconds where
# an idle vCPU halts, then overlaps the writing instead of following it.
CMD_RING_EARLY = 16

# The most bytes one control message may hold: the agent's socket drops a bigger one together with
# the connection (ZeroMQ's MAXMSGSIZE), so servers measure theirs first (``server/sizes.py``). The
# agent hands its cap to each server in the config ("max_message_bytes").
MAX_MESSAGE_BYTES = 256 * 1024 * 1024
# An ERROR's "kind" when the server sent it in place of a message over the cap: nothing crashed.
KIND_MESSAGE_TOO_BIG = "message-too-big"
# ... and when an env's info value may not be sent as it is (``info_codec.py``): nor did anything crash.
KIND_INFO_ENCODING = "info-encoding"

_EXT_NDARRAY = 1
_EXT_NUMPY_SCALAR = 2
_EXT_TUPLE = 3
EXT_PICKLE = 4  # one value pickled: only infos, only from runtimes that are no trust boundary
_EXT_ENV_SPEC = 5  # a gymnasium EnvSpec as its fields (``env_spec_fields``): data, not code


def _buffer_option() -> dict[str, int]:
    """A small first buffer for every packer (it grows as a message needs). msgpack's C packer
    starts with 256 KiB, and one made while another is packing (each array, tuple or numpy
    scalar in a message is packed by a packer of its own) gets it from mmap: 15-20 us each, where
    packing the value takes 1-2 us. ``buf_size`` is newer than msgpack 1.0; older ones go without."""
    try:
        msgpack.Packer(buf_size=4096)
    except TypeError:
        return {}
    return {"buf_size": 4096}


_SMALL = _buffer_option()

# Each tuple is decoded by a nested msgpack call: without a bound, a few kilobytes of nested
# tuples overflow the C stack (a crash, not an exception). No honest message nests this deep.
MAX_TUPLE_NESTING = 32
_nesting = threading.local()


class ProtocolError(Exception):
    """A message that does not follow the protocol: corrupt, oversized or of an unsafe type."""


class UnpickleError(ProtocolError):
    """A pickled info value that this side cannot load (its class is not importable here)."""


def _checked_dtype(descr: Any) -> np.dtype:
    dtype = safe_dtype(descr, MESSAGE_KINDS)
    if dtype is None:
        raise ProtocolError(f"dtype {str(descr)[:40]!r} is not allowed across the isolation boundary")
    return dtype


def numpy_ext(obj: Any) -> msgpack.ExtType:
    """A numpy array or scalar of a ``MESSAGE_KINDS`` dtype (the caller checked) as its extension."""
    if isinstance(obj, np.ndarray):
        header = msgpack.Packer(**_SMALL).pack([obj.dtype.str, list(obj.shape)])
        return msgpack.ExtType(_EXT_NDARRAY, header + np.ascontiguousarray(obj).tobytes())
    return msgpack.ExtType(_EXT_NUMPY_SCALAR, msgpack.Packer(**_SMALL).pack(obj.dtype.str) + obj.tobytes())


def tuple_ext(items: bytes) -> msgpack.ExtType:
    """A tuple as its extension, given its items packed as a list."""
    return msgpack.ExtType(_EXT_TUPLE, items)


def new_packer(default: Callable[[Any], Any]) -> msgpack.Packer:
    """A packer of exact types (subclasses and tuples go to ``default``), bytes as bin."""
    return msgpack.Packer(default=default, use_bin_type=True, strict_types=True, **_SMALL)


def _default(obj: Any) -> Any:
    if isinstance(obj, np.ndarray):
        if not allowed(obj.dtype, MESSAGE_KINDS):
            raise TypeError(f"numpy arrays of dtype {obj.dtype} cannot be sent (object arrays are not allowed)")
        return numpy_ext(obj)
    if isinstance(obj, np.generic):
        if not allowed(obj.dtype, MESSAGE_KINDS):
            raise TypeError(f"numpy scalars of dtype {obj.dtype} cannot be sent")
        return numpy_ext(obj)
    if isinstance(obj, tuple):
        return tuple_ext(_packer_bytes(list(obj)))
    if isinstance(obj, dict):
        return dict(obj)
    if isinstance(obj, list):
        return list(obj)
    if isinstance(obj, (bool, int, float, str, bytes)):
        return _plain(obj)
    if _is_env_spec(obj):
        return msgpack.ExtType(_EXT_ENV_SPEC, _packer_bytes(env_spec_fields(obj)))
    raise TypeError(
        f"values of type {type(obj).__module__}.{type(obj).__qualname__} cannot cross the isolation "
        "boundary; send numbers, strings, bytes, lists, tuples, dicts or numpy arrays"
    )


# -- gymnasium's EnvSpec (what ``env.spec`` holds): sent as its fields, rebuilt where gymnasium is --------
_SPEC_FIELDS = {  # field -> the types its value may have (None: may be None)
    "id": (str,),
    "entry_point": (str, None),
    "reward_threshold": (int, float, None),
    "nondeterministic": (bool,),
    "max_episode_steps": (int, None),
    "order_enforce": (bool,),
    "disable_env_checker": (bool,),
    "kwargs": (dict,),
    "additional_wrappers": (list,),
    "vector_entry_point": (str, None),
}


def _is_env_spec(obj: Any) -> bool:
    """Whether ``obj`` is gymnasium's ``EnvSpec``, told by its class's name (the env side may have
    no gymnasium to import)."""
    kind = type(obj)
    return kind.__qualname__ == "EnvSpec" and kind.__module__ == "gymnasium.envs.registration"


def _entry_point_text(value: Any) -> Any:
    """An entry point as gymnasium's registry writes it, ``"module:name"``: a callable (an env class
    registered by itself) is sent as the path it is found at, never as code."""
    if value is None or isinstance(value, str):
        return value
    module, name = getattr(value, "__module__", None), getattr(value, "__qualname__", None)
    if not isinstance(module, str) or not isinstance(name, str):
        raise TypeError(f"an EnvSpec's entry point {value!r} is neither a 'module:name' path nor named by one")
    return f"{module}:{name}"


def env_spec_fields(spec: Any) -> dict[str, Any]:
    """The fields gymnasium's ``EnvSpec(...)`` takes (``to_json``'s), entry points as paths;
    its wrappers as ``[name, entry_point, kwargs]`` lists. Its kwargs must be sendable themselves."""
    return {
        "id": spec.id,
        "entry_point": _entry_point_text(spec.entry_point),
        "reward_threshold": spec.reward_threshold,
        "nondeterministic": spec.nondeterministic,
        "max_episode_steps": spec.max_episode_steps,
        "order_enforce": spec.order_enforce,
        "disable_env_checker": spec.disable_env_checker,
        "kwargs": dict(spec.kwargs),
        "additional_wrappers": [
            [wrapper.name, _entry_point_text(wrapper.entry_point), wrapper.kwargs]
            for wrapper in spec.additional_wrappers
        ],
        "vector_entry_point": _entry_point_text(spec.vector_entry_point),
    }


def _env_spec(data: bytes, unpickle: bool) -> Any:
    """A gymnasium ``EnvSpec`` from its fields (checked: untrusted input); the fields as a dict
    where gymnasium is not installed (an env runtime of old gym). Nothing is imported or made
    from its entry points: ``gymnasium.make(spec)`` would, when the caller chooses to."""
    depth = getattr(_nesting, "depth", 0)
    if depth >= MAX_TUPLE_NESTING:
        raise ProtocolError(f"values nested deeper than {MAX_TUPLE_NESTING}")
    _nesting.depth = depth + 1
    try:
        fields = unpackb(data, unpickle)
    finally:
        _nesting.depth = depth
    if not isinstance(fields, dict) or set(fields) != set(_SPEC_FIELDS):
        raise ProtocolError("corrupt EnvSpec")
    for key, kinds in _SPEC_FIELDS.items():
        value = fields[key]
        if not (value is None and None in kinds) and not isinstance(value, tuple(k for k in kinds if k is not None)):
            raise ProtocolError(f"an EnvSpec whose {key} is a {type(value).__name__}")
    wrappers = fields["additional_wrappers"]
    if not all(
        isinstance(w, list)
        and len(w) == 3
        and isinstance(w[0], str)
        and isinstance(w[1], str)
        and (w[2] is None or isinstance(w[2], dict))
        for w in wrappers
    ):
        raise ProtocolError("an EnvSpec with corrupt additional_wrappers")
    try:
        from gymnasium.envs.registration import EnvSpec, WrapperSpec
    except ImportError:
        return fields
    try:
        return EnvSpec(
            **{key: value for key, value in fields.items() if key != "additional_wrappers"},
            additional_wrappers=tuple(WrapperSpec(*w) for w in wrappers),
        )
    except Exception as exc:  # gymnasium's checks of the id
        raise ProtocolError(f"an EnvSpec gymnasium refuses: {type(exc).__name__}: {exc}") from None


def _plain(obj: Any) -> Any:
    base: type[Any]  # declared, never evaluated: the four constructors take different arguments
    for base in (int, float, str, bytes):
        if isinstance(obj, base):
            return base(obj)
    return obj


def _packer_bytes(obj: Any) -> bytes:
    # msgpack ships py.typed but leaves packb unannotated; no local or cast on this per-message path
    return new_packer(_default).pack(obj)  # type: ignore[no-any-return]


def _ext_hook(code: int, data: bytes) -> Any:
    if code == _EXT_NDARRAY:
        unpacker = msgpack.Unpacker(max_buffer_size=len(data) + 1, strict_map_key=False)
        unpacker.feed(data)
        try:
            descr, shape = unpacker.unpack()
        except Exception as exc:
            raise ProtocolError("corrupt ndarray header") from exc
        header_len = unpacker.tell()
        dtype = _checked_dtype(descr)
        if (
            not isinstance(shape, list)
            or len(shape) > 32
            or not all(isinstance(d, int) and 0 <= d < 2**40 for d in shape)
        ):
            raise ProtocolError(f"invalid ndarray shape {shape!r}")
        count = 1
        for d in shape:
            count *= d
        payload = data[header_len:]
        if count * dtype.itemsize != len(payload):
            raise ProtocolError(f"ndarray payload of {len(payload)} bytes does not match {descr}{tuple(shape)}")
        return np.frombuffer(payload, dtype=dtype).reshape(shape).copy()
    if code == _EXT_NUMPY_SCALAR:
        # The descriptor is a short msgpack str (one byte 0xa0 | length, then the text): read
        # directly, as every step's infos hold a few such scalars per env.
        size = data[0] & 0x1F if data and data[0] & 0xE0 == 0xA0 else -1
        if size >= 0:
            try:
                descr = data[1 : 1 + size].decode("ascii")
            except UnicodeDecodeError:
                raise ProtocolError("corrupt numpy scalar") from None
            header_len = 1 + size
        else:
            unpacker = msgpack.Unpacker(max_buffer_size=len(data) + 1)
            unpacker.feed(data)
            try:
                descr = unpacker.unpack()
            except Exception as exc:
                raise ProtocolError("corrupt numpy scalar") from exc
            header_len = unpacker.tell()
        dtype = _checked_dtype(descr)
        payload = data[header_len:]
        if len(payload) != dtype.itemsize:
            raise ProtocolError("numpy scalar payload has the wrong size")
        return np.frombuffer(payload, dtype=dtype)[0]
    if code == _EXT_TUPLE:
        return _tuple(data, False)
    if code == _EXT_ENV_SPEC:
        return _env_spec(data, False)
    if code == EXT_PICKLE:
        raise ProtocolError(
            "a pickled value: the agent unpickles infos only from servers whose runtime is no trust "
            "boundary (process, venv, micromamba), never from this one"
        )
    raise ProtocolError(f"unknown msgpack extension type {code}")


def _unpickling_hook(code: int, data: bytes) -> Any:
    if code == EXT_PICKLE:
        try:
            return pickle.loads(data)
        except Exception as exc:
            raise UnpickleError(f"{type(exc).__name__}: {exc}") from None
    if code == _EXT_TUPLE:
        return _tuple(data, True)
    if code == _EXT_ENV_SPEC:
        return _env_spec(data, True)
    return _ext_hook(code, data)


def _tuple(data: bytes, unpickle: bool) -> tuple[Any, ...]:
    depth = getattr(_nesting, "depth", 0)
    if depth >= MAX_TUPLE_NESTING:
        raise ProtocolError(f"tuples nested deeper than {MAX_TUPLE_NESTING}")
    _nesting.depth = depth + 1
    try:
        value = unpackb(data, unpickle)
    finally:
        _nesting.depth = depth
    if not isinstance(value, list):
        raise ProtocolError("corrupt tuple")
    return tuple(value)


def packb(obj: Any) -> bytes:
    """Encode a message; raises TypeError naming any value that has no safe encoding."""
    return _packer_bytes(obj)


def unpackb(data: bytes, unpickle: bool = False) -> Any:
    """Decode a message from an untrusted peer; any malformation becomes a ``ProtocolError``.

    ``unpickle``: also load pickled values (``EXT_PICKLE``), for the infos of a server whose runtime
    is no trust boundary alone; one that cannot be loaded here is an ``UnpickleError``."""
    if len(data) > MAX_MESSAGE_BYTES:
        raise ProtocolError(f"message of {len(data)} bytes exceeds the limit of {MAX_MESSAGE_BYTES}")
    try:
        return msgpack.unpackb(
            data,
            ext_hook=_unpickling_hook if unpickle else _ext_hook,
            raw=False,
            strict_map_key=False,
            use_list=True,
        )
    except ProtocolError:
        raise
    except Exception as exc:
        raise ProtocolError(f"undecodable message: {type(exc).__name__}: {exc}") from exc
