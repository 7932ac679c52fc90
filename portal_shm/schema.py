"""Spaces as plain data: the env side describes its spaces, the agent side rebuilds them.

``space_to_schema`` runs in the env runtime and must not import gymnasium: it recognises spaces of
gymnasium, legacy ``gym`` and look-alikes by class name and attributes. ``schema_to_space`` runs in
the agent and treats the schema as untrusted input.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

FIXED_KINDS = ("Box", "Discrete", "MultiDiscrete", "MultiBinary")
CONTAINER_KINDS = ("Dict", "Tuple")
MAX_SCHEMA_DEPTH = 16


def space_to_schema(space: Any) -> dict:
    """Describe a space (gymnasium, gym or compatible) as msgpack-able data."""
    kind = type(space).__name__
    bases = [c.__name__ for c in type(space).__mro__]
    for known in FIXED_KINDS + CONTAINER_KINDS + ("Text",):
        if known in bases:
            kind = known
            break
    if kind == "Box":
        return {
            "kind": "Box",
            "low": np.asarray(space.low),
            "high": np.asarray(space.high),
            "shape": list(space.shape),
            "dtype": np.dtype(space.dtype).str,
        }
    if kind == "Discrete":
        return {
            "kind": "Discrete",
            "n": int(space.n),
            "start": int(getattr(space, "start", 0)),
            "dtype": np.dtype(getattr(space, "dtype", np.int64)).str,
        }
    if kind == "MultiDiscrete":
        return {
            "kind": "MultiDiscrete",
            "nvec": np.asarray(space.nvec),
            "start": np.asarray(getattr(space, "start", np.zeros_like(np.asarray(space.nvec)))),
            "dtype": np.dtype(space.dtype).str,
        }
    if kind == "MultiBinary":
        n = space.n
        return {"kind": "MultiBinary", "n": [int(x) for x in np.atleast_1d(n)] if not isinstance(n, int) else int(n)}
    if kind == "Dict":
        return {"kind": "Dict", "spaces": [[key, space_to_schema(sub)] for key, sub in space.spaces.items()]}
    if kind == "Tuple":
        return {"kind": "Tuple", "spaces": [space_to_schema(sub) for sub in space.spaces]}
    if kind == "Text":
        charset = getattr(space, "characters", None) or getattr(space, "character_set", None)
        return {
            "kind": "Text",
            "min_length": int(space.min_length),
            "max_length": int(space.max_length),
            "charset": "".join(sorted(charset)) if charset is not None else None,
        }
    text = re.sub(r" at 0x[0-9a-f]+", "", repr(space))[:500]  # addresses differ between processes
    return {"kind": "Opaque", "name": f"{type(space).__module__}.{type(space).__qualname__}", "repr": text}


def is_fixed(schema: dict) -> bool:
    """Whether every leaf of the space has a fixed shape and dtype, so it can live in the ring."""
    kind = schema["kind"]
    if kind in FIXED_KINDS:
        return True
    if kind == "Dict":
        return all(is_fixed(sub) for _, sub in schema["spaces"])
    if kind == "Tuple":
        return all(is_fixed(sub) for sub in schema["spaces"])
    return False


def leaf_shape_dtype(schema: dict) -> tuple[tuple[int, ...], np.dtype]:
    """Shape and dtype of one fixed leaf, as gymnasium's ``batch_space`` would batch it."""
    kind = schema["kind"]
    if kind == "Box":
        return tuple(schema["shape"]), np.dtype(schema["dtype"])
    if kind == "Discrete":
        return (), np.dtype(schema["dtype"])
    if kind == "MultiDiscrete":
        return tuple(np.asarray(schema["nvec"]).shape), np.dtype(schema["dtype"])
    if kind == "MultiBinary":
        n = schema["n"]
        return ((n,) if isinstance(n, int) else tuple(n)), np.dtype(np.int8)
    raise ValueError(f"{kind} has no fixed layout")


def leaves(schema: dict, path: tuple = ()) -> list[tuple[tuple, dict]]:
    """All leaves in a stable order, each with its path of Dict keys and Tuple indices."""
    kind = schema["kind"]
    if kind == "Dict":
        out = []
        for key, sub in schema["spaces"]:
            out.extend(leaves(sub, path + (key,)))
        return out
    if kind == "Tuple":
        out = []
        for index, sub in enumerate(schema["spaces"]):
            out.extend(leaves(sub, path + (index,)))
        return out
    return [(path, schema)]


def schema_to_space(schema: Any, depth: int = 0) -> Any:
    """Rebuild a gymnasium space from an (untrusted) schema; raises ValueError on anything odd."""
    from gymnasium import spaces

    if depth > MAX_SCHEMA_DEPTH:
        raise ValueError("space schema nested too deeply")
    if not isinstance(schema, dict) or not isinstance(schema.get("kind"), str):
        raise ValueError(f"invalid space schema {schema!r:.200}")
    kind = schema["kind"]
    if kind == "Box":
        dtype = np.dtype(schema["dtype"])
        return spaces.Box(low=schema["low"], high=schema["high"], shape=tuple(schema["shape"]), dtype=dtype)
    if kind == "Discrete":
        return spaces.Discrete(int(schema["n"]), start=int(schema["start"]), dtype=np.dtype(schema["dtype"]))
    if kind == "MultiDiscrete":
        return spaces.MultiDiscrete(schema["nvec"], dtype=np.dtype(schema["dtype"]), start=schema["start"])
    if kind == "MultiBinary":
        n = schema["n"]
        return spaces.MultiBinary(n if isinstance(n, int) else list(n))
    if kind == "Dict":
        return spaces.Dict({key: schema_to_space(sub, depth + 1) for key, sub in schema["spaces"]})
    if kind == "Tuple":
        return spaces.Tuple([schema_to_space(sub, depth + 1) for sub in schema["spaces"]])
    if kind == "Text":
        charset = schema.get("charset")
        kwargs = {"min_length": int(schema["min_length"])}
        if charset is not None:
            kwargs["charset"] = charset
        return spaces.Text(int(schema["max_length"]), **kwargs)
    if kind == "Opaque":
        from .remote_space import RemoteSpace

        return RemoteSpace(str(schema.get("name")), str(schema.get("repr")))
    raise ValueError(f"unknown space kind {kind!r}")
