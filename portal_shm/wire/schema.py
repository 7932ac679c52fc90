"""Spaces as plain data: the env side describes its spaces, the agent side rebuilds them.

``space_to_schema`` runs in the env runtime and must not import gymnasium: it recognises spaces of
gymnasium, legacy ``gym`` and look-alikes by class name and attributes. The agent rebuilds spaces
from schemas in ``portal_shm.agent.contract.spaces``, treating them as untrusted input.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

FIXED_KINDS = ("Box", "Discrete", "MultiDiscrete", "MultiBinary")
CONTAINER_KINDS = ("Dict", "Tuple")
# Standard spaces whose values have no fixed layout: they travel as msgpack beside the ring.
VARIABLE_KINDS = ("Text", "Graph", "Sequence", "OneOf")
MAX_SCHEMA_DEPTH = 16


def space_kind(space: Any) -> str:
    """The standard space a space is (by class name, so gym, gymnasium and look-alikes all match)."""
    bases = [c.__name__ for c in type(space).__mro__]
    for known in FIXED_KINDS + CONTAINER_KINDS + VARIABLE_KINDS:
        if known in bases:
            return known
    return type(space).__name__


def space_to_schema(space: Any) -> dict[str, Any]:
    """Describe a space (gymnasium, gym or compatible) as msgpack-able data."""
    kind = space_kind(space)
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
    if kind == "Graph":
        edge = space.edge_space
        return {
            "kind": "Graph",
            "node_space": space_to_schema(space.node_space),
            "edge_space": None if edge is None else space_to_schema(edge),
        }
    if kind == "Sequence":
        return {
            "kind": "Sequence",
            "space": space_to_schema(space.feature_space),
            "stack": bool(getattr(space, "stack", False)),
        }
    if kind == "OneOf":
        return {"kind": "OneOf", "spaces": [space_to_schema(sub) for sub in space.spaces]}
    text = re.sub(r" at 0x[0-9a-f]+", "", repr(space))[:500]  # addresses differ between processes
    return {"kind": "Opaque", "name": f"{type(space).__module__}.{type(space).__qualname__}", "repr": text}


def is_fixed(schema: dict[str, Any]) -> bool:
    """Whether every leaf of the space has a fixed shape and dtype, so it can live in the ring."""
    kind = schema["kind"]
    if kind in FIXED_KINDS:
        return True
    if kind == "Dict":
        return all(is_fixed(sub) for _, sub in schema["spaces"])
    if kind == "Tuple":
        return all(is_fixed(sub) for sub in schema["spaces"])
    return False


def has_opaque(schema: Any) -> bool:
    """Whether any part of the space (nested ones included) is a custom space described only by name."""
    if isinstance(schema, dict):
        return schema.get("kind") == "Opaque" or any(has_opaque(v) for v in schema.values())
    if isinstance(schema, list):
        return any(has_opaque(v) for v in schema)
    return False


def leaf_shape_dtype(schema: dict[str, Any]) -> tuple[tuple[int, ...], np.dtype]:
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


def leaves(schema: dict[str, Any], path: tuple[Any, ...] = ()) -> list[tuple[tuple[Any, ...], dict[str, Any]]]:
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


def revive(space: Any, value: Any) -> Any:
    """Give a value that crossed the wire the types its space expects.

    msgpack keeps numbers, strings, arrays, lists, dicts and tuples, but not named tuples: a
    Graph's ``GraphInstance`` (also inside Sequence and OneOf values) arrives as a plain tuple.
    Both sides hold the space, so they rebuild those from it instead of trusting a type name sent
    by the peer. Values of fixed-layout and unknown (custom) spaces are returned as they are.
    """
    kind = space_kind(space)
    if kind == "Graph":
        if isinstance(value, (tuple, list)) and len(value) == 3:
            instance = _graph_instance_type(space)
            nodes, edges, links = value
            edge_space = space.edge_space
            return instance(
                _revive_stack(space.node_space, nodes),
                None if edges is None or edge_space is None else _revive_stack(edge_space, edges),
                links,
            )
        return value
    if kind == "Sequence":
        if getattr(space, "stack", False):
            return _revive_stack(space.feature_space, value)
        return tuple(revive(space.feature_space, item) for item in value) if isinstance(value, (tuple, list)) else value
    if kind == "OneOf":
        if isinstance(value, (tuple, list)) and len(value) == 2:
            index = value[0]
            subspaces = space.spaces
            if isinstance(index, (int, np.integer)) and 0 <= int(index) < len(subspaces):
                return (index, revive(subspaces[int(index)], value[1]))
        return value
    if kind == "Dict" and isinstance(value, dict):
        subspaces = space.spaces
        return {key: revive(subspaces[key], item) if key in subspaces else item for key, item in value.items()}
    if kind == "Tuple" and isinstance(value, (tuple, list)):
        return tuple(revive(sub, item) for sub, item in zip(space.spaces, value))
    return value


def _revive_stack(space: Any, value: Any) -> Any:
    """Stacked values (Graph nodes/edges, stacked Sequences): arrays, or dicts/tuples of arrays."""
    kind = space_kind(space)
    if kind == "Dict" and isinstance(value, dict):
        return {
            key: _revive_stack(space.spaces[key], item) if key in space.spaces else item for key, item in value.items()
        }
    if kind == "Tuple" and isinstance(value, (tuple, list)):
        return tuple(_revive_stack(sub, item) for sub, item in zip(space.spaces, value))
    return value


def _graph_instance_type(space: Any) -> Any:
    import sys
    from collections import namedtuple

    module = sys.modules.get(type(space).__module__)
    found = getattr(module, "GraphInstance", None)
    if found is None:
        for name in ("gymnasium.spaces.graph", "gym.spaces.graph"):
            found = getattr(sys.modules.get(name), "GraphInstance", None)
            if found is not None:
                break
    return found or namedtuple("GraphInstance", ["nodes", "edges", "edge_links"])
