"""Agent-side checks of everything an env runtime sends: the env side is untrusted.

An env server may be buggy or hostile (it runs code the agent did not write, in a runtime the
agent does not control). Every message it sends goes through one of these functions before the
agent uses it: types, sizes and env indices are checked, spaces are bounded before gymnasium
allocates anything for them, and any violation raises ``ServerProtocolError``. The worst a
server can do is send wrong observations or make the agent raise; it cannot make the agent run
its code (nothing from it is unpickled; only the infos of servers whose runtime is no
trust boundary, the agent's own user and code, may hold pickles: ``decode_infos``), read outside the ring (the agent computes the ring's layout
itself), allocate without bound, or crash.
"""

from __future__ import annotations

from typing import Any, Optional

import numpy as np

from ...errors import InfoEncodingError, ServerProtocolError
from ...wire.dtypes import RING_KINDS, allowed, safe_dtype
from ...wire.end_states import MAX_STATE_BYTES
from ...wire.protocol import ProtocolError, UnpickleError, unpackb
from ...wire.schema import CONTAINER_KINDS, MAX_SCHEMA_DEPTH

MAX_LEAF_BYTES = 1 << 30  # one env's observation leaf: a 1 GiB frame is already absurd
MAX_LEAVES = 4096
MAX_TEXT = 64 * 1024  # error messages and tracebacks are clipped to this many characters


def _fail(what: str) -> ServerProtocolError:
    return ServerProtocolError(what)


def _clip(value: Any) -> str:
    text = value if isinstance(value, str) else repr(value)
    return text if len(text) <= MAX_TEXT else text[:MAX_TEXT] + " [...clipped]"


def _int(value: Any, what: str, low: int = -(2**63), high: int = 2**63 - 1) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not low <= int(value) <= high:
        raise _fail(f"{what} must be an integer in [{low}, {high}], got {_clip(value)[:80]}")
    return int(value)


def _dtype(value: Any, what: str) -> np.dtype:
    dtype = safe_dtype(value, RING_KINDS)
    if dtype is None:
        raise _fail(f"{what} has a dtype not allowed in the ring: {_clip(value)[:80]}")
    return dtype


def _shape(value: Any, what: str) -> tuple[int, ...]:
    if not isinstance(value, (list, tuple)) or len(value) > 32:
        raise _fail(f"{what} has an invalid shape {_clip(value)[:80]}")
    return tuple(_int(d, f"{what}'s shape", 0, 2**40) for d in value)


def _bounded(shape: tuple[int, ...], itemsize: int, what: str) -> None:
    count = 1
    for d in shape:
        count *= d
    if count * itemsize > MAX_LEAF_BYTES:
        raise _fail(f"{what} would need {count * itemsize} bytes per env (limit {MAX_LEAF_BYTES})")


def _array_like(value: Any, shape: Optional[tuple[int, ...]], what: str) -> None:
    if isinstance(value, np.ndarray):
        if not allowed(value.dtype, RING_KINDS):
            raise _fail(f"{what} is an array of dtype {value.dtype}")
        if shape is not None and value.shape not in ((), shape):
            raise _fail(f"{what} has shape {value.shape}, the space's is {shape}")
    elif isinstance(value, bool) or not isinstance(value, (int, float, np.number)):
        raise _fail(f"{what} must be a number or an array, got {type(value).__name__}")


def check_schema(schema: Any, what: str = "space", depth: int = 0, count: Optional[list[int]] = None) -> None:
    """Raise unless ``schema`` is a space description the agent can rebuild within bounds."""
    count = [0] if count is None else count
    count[0] += 1
    if depth > MAX_SCHEMA_DEPTH or count[0] > MAX_LEAVES:
        raise _fail(f"{what} is nested too deeply or has too many parts")
    if not isinstance(schema, dict) or not isinstance(schema.get("kind"), str):
        raise _fail(f"{what} is not a space description: {_clip(schema)[:200]}")
    kind = schema["kind"]
    if kind == "Box":
        dtype = _dtype(schema.get("dtype"), what)
        shape = _shape(schema.get("shape"), what)
        _bounded(shape, dtype.itemsize, what)
        for bound in ("low", "high"):
            _array_like(schema.get(bound), shape, f"{what}'s {bound}")
    elif kind == "Discrete":
        _dtype(schema.get("dtype"), what)
        _int(schema.get("n"), f"{what}'s n", 1)
        _int(schema.get("start"), f"{what}'s start")
    elif kind == "MultiDiscrete":
        dtype = _dtype(schema.get("dtype"), what)
        nvec: Any = schema.get("nvec")  # a number or an array once ``_array_like`` passed it
        _array_like(nvec, None, f"{what}'s nvec")
        _array_like(schema.get("start"), np.shape(nvec), f"{what}'s start")
        _bounded(np.shape(nvec), dtype.itemsize, what)
    elif kind == "MultiBinary":
        n = schema.get("n")
        shape = (_int(n, f"{what}'s n", 1, 2**40),) if not isinstance(n, (list, tuple)) else _shape(n, what)
        _bounded(shape, 1, what)
    elif kind in CONTAINER_KINDS:
        parts = schema.get("spaces")
        if not isinstance(parts, list):
            raise _fail(f"{what} has no list of subspaces")
        for index, part in enumerate(parts):
            if kind == "Dict":
                if not (isinstance(part, list) and len(part) == 2 and isinstance(part[0], str)):
                    raise _fail(f"{what} has an invalid Dict entry")
                key, part = part
            else:
                key = index
            check_schema(part, f"{what}[{key!r:.40}]", depth + 1, count)
    elif kind == "Text":
        _int(schema.get("min_length"), f"{what}'s min_length", 0, 2**31)
        _int(schema.get("max_length"), f"{what}'s max_length", 0, 2**31)
        if schema.get("charset") is not None and not (
            isinstance(schema["charset"], str) and len(schema["charset"]) < 2**16
        ):
            raise _fail(f"{what} has an invalid charset")
    elif kind == "Graph":
        check_schema(schema.get("node_space"), f"{what}'s node space", depth + 1, count)
        if schema.get("edge_space") is not None:
            check_schema(schema["edge_space"], f"{what}'s edge space", depth + 1, count)
    elif kind == "Sequence":
        check_schema(schema.get("space"), f"{what}'s feature space", depth + 1, count)
    elif kind == "OneOf":
        parts = schema.get("spaces")
        if not isinstance(parts, list):
            raise _fail(f"{what} has no list of subspaces")
        for index, part in enumerate(parts):
            check_schema(part, f"{what}[{index}]", depth + 1, count)
    elif kind == "Opaque":
        if not all(isinstance(schema.get(k), str) and len(schema[k]) <= 4096 for k in ("name", "repr")):
            raise _fail(f"{what} is an opaque space without a valid name and repr")
    else:
        raise _fail(f"{what} is of unknown kind {kind!r:.40}")


def space_from_schema(schema: Any, what: str = "space") -> Any:
    """The gymnasium space of an untrusted schema, or ``ServerProtocolError``."""
    from .spaces import schema_to_space

    check_schema(schema, what)
    try:
        return schema_to_space(schema)
    except Exception as exc:
        raise _fail(f"{what} cannot be rebuilt: {type(exc).__name__}: {_clip(str(exc))[:300]}") from None


def check_hello(message: dict[str, Any], env_count: int, who: str, spaces: bool = True) -> dict[str, Any]:
    """The handshake of a server hosting ``env_count`` envs, with every field checked (``spaces=False``:
    but its spaces, which the caller found equal to ones checked before)."""
    for key in ("observation_spaces", "action_spaces") if spaces else ():
        schemas = message.get(key)
        if not isinstance(schemas, list) or len(schemas) != env_count:
            raise _fail(f"{who} sent a handshake without valid {key}")
        for index, schema in enumerate(schemas):
            space_from_schema(schema, f"{who}'s {key[:-1].replace('_', ' ')} {index}")
    metadata = message.get("metadata")
    if metadata is not None and not isinstance(metadata, dict):
        raise _fail(f"{who} sent metadata that is not a map")
    render_mode = message.get("render_mode")
    if render_mode is not None and not (isinstance(render_mode, str) and len(render_mode) <= 256):
        raise _fail(f"{who} sent an invalid render_mode")
    if not is_hosting(message.get("hosting")):
        raise _fail(f"{who} sent an invalid hosting (what steps its envs)")
    return message


def is_hosting(value: Any) -> bool:
    """Whether ``value`` may be a server's ``hosting`` (what steps its envs): a short text, or None."""
    return value is None or (isinstance(value, str) and len(value) <= 300)


def check_error(message: dict[str, Any], env_indices: list[int]) -> tuple[Any, str, str, str, str]:
    """(env_index, phase, type, message, traceback) of an ERROR, text clipped, index checked
    (``env_index`` is None or the server's value equal to one of ``env_indices``)."""
    env_index = message.get("env_index")
    if env_index is not None and (isinstance(env_index, bool) or env_index not in env_indices):
        env_index = None  # a server may only blame its own envs
    return (
        env_index,
        _clip(message.get("phase"))[:200],
        _clip(message.get("type"))[:300],
        _clip(message.get("message")),
        _clip(message.get("traceback", "")),
    )


def info_refusal(message: dict[str, Any], env_index: Any, phase: str, boundary: str, runtime: str) -> InfoEncodingError:
    """The ``InfoEncodingError`` of an ERROR whose kind says its server refused to send an env's
    info value (``wire/info_codec.py``), its texts clipped; ``boundary``: the runtime's, as the
    agent knows it (the server does not say)."""

    def text(key: str) -> str:
        return _clip(message.get(key, ""))[:300]

    cause = message.get("cause")
    return InfoEncodingError(
        env_index,
        phase,
        text("key") or "infos",
        text("what") or "a value",
        text("hint"),
        cause if cause in ("boundary", "pickle") else "boundary",
        boundary,
        text("reason"),
        runtime,
    )


def check_blobs(blobs: Any, env_indices: list[int], who: str) -> dict[int, bytes]:
    """{env index: encoded infos} sent beside the ring, for this server's envs only."""
    if blobs is None:
        return {}
    if not _bytes_per_env(blobs, env_indices):
        raise _fail(f"{who} sent invalid infos beside the ring")
    checked: dict[int, bytes] = blobs
    return checked


def _bytes_per_env(value: Any, env_indices: list[int]) -> bool:
    """Whether ``value`` is {env index of ``env_indices``: bytes}."""
    return isinstance(value, dict) and all(
        isinstance(i, int) and not isinstance(i, bool) and i in env_indices and isinstance(b, bytes)
        for i, b in value.items()
    )


def check_end_states(states: Any, env_indices: list[int], who: str) -> dict[int, bytes]:
    """{env index: state at its episode's end} a failed server left for an exact restart
    (``wire/end_states.py``), for this server's envs only; one over ``MAX_STATE_BYTES`` is not
    taken (that env's restart then ends its episode, as it would without a state)."""
    if not _bytes_per_env(states, env_indices):
        raise _fail(f"{who} left invalid episode-end states")
    return {i: b for i, b in states.items() if len(b) <= MAX_STATE_BYTES}


def check_reply(message: dict[str, Any], env_indices: list[int], who: str) -> tuple[dict[int, bytes], list[Any]]:
    """(extras, results) of a REPLY: results are one per env of the server, or none."""
    extras = check_blobs(message.get("extras"), env_indices, who)
    results = message.get("results")
    if results is None:
        results = []
    if not isinstance(results, list) or len(results) not in (0, len(env_indices)):
        raise _fail(
            f"{who} sent {len(results) if isinstance(results, list) else 'invalid'} results for {len(env_indices)} envs"
        )
    return extras, results


def decode_infos(
    blob: Any, env_index: int, unpickle: bool = False
) -> tuple[list[dict[Any, Any]], Optional[dict[Any, Any]], Optional[dict[str, list[Any]]]]:
    """One env's infos blob: (list of info dicts, variable-layout observation or None, and the
    infos columns of its server's envs or None: a native batch's, in its first env's row).

    ``unpickle``: the env's runtime is no trust boundary (process, venv, micromamba), so values
    msgpack cannot carry exactly come pickled (``wire/info_codec.py``); from any other server a
    pickle is a ``ServerProtocolError``, and never loaded. One the agent cannot load (its class is
    not importable here) is an ``InfoEncodingError``."""
    if not isinstance(blob, bytes):
        raise _fail(f"env {env_index} sent infos that are not bytes")
    try:
        entry = unpackb(blob, unpickle)
    except UnpickleError as exc:
        raise InfoEncodingError(
            env_index, "step", "infos", "a pickled value", "send plain data instead", "unpickle", reason=str(exc)
        ) from None
    except ProtocolError as exc:
        raise _fail(f"env {env_index} wrote corrupt infos: {exc}") from None
    if not (
        isinstance(entry, list)
        and len(entry) in (2, 3)
        and isinstance(entry[0], list)
        and len(entry[0]) <= 2
        and all(isinstance(d, dict) for d in entry[0])
        and (entry[1] is None or isinstance(entry[1], dict))
        and (len(entry) == 2 or _columns(entry[2]))
    ):
        raise _fail(f"env {env_index} wrote infos of an unexpected shape")
    return entry[0], entry[1], entry[2] if len(entry) == 3 else None


_COLUMN_VALUES = (int, float, bool)


def _columns(value: Any) -> bool:
    """Whether ``value`` is infos columns: {name: [plain number per env]}, no mask or final names."""
    return isinstance(value, dict) and all(
        isinstance(key, str)
        and not key.startswith("_")
        and key not in ("final_obs", "final_info")
        and isinstance(values, list)
        and all(type(v) in _COLUMN_VALUES for v in values)
        for key, values in value.items()
    )
