"""Batched values of a space as a flat list of arrays and back, in the schema's leaf order.

Host and agent both hold the space's schema (``portal_shm.wire.schema``), so a batch crosses the
link as its leaves alone, one frame each, and is rebuilt as the same Dict/Tuple nesting.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..wire.schema import leaf_shape_dtype, leaves


def leaf_specs(schema: dict) -> list[tuple[tuple, np.dtype]]:
    """(shape of one env's value, dtype) of each leaf of a fixed-layout schema."""
    return [leaf_shape_dtype(leaf) for _, leaf in leaves(schema)]


def flatten(value: Any, schema: dict) -> list:
    out = []
    for path, _ in leaves(schema):
        node = value
        for part in path:
            node = node[part]
        out.append(np.asarray(node))
    return out


def unflatten(arrays: list, schema: dict) -> Any:
    it = iter(arrays)

    def build(node: dict) -> Any:
        if node["kind"] == "Dict":
            return {key: build(sub) for key, sub in node["spaces"]}
        if node["kind"] == "Tuple":
            return tuple(build(sub) for sub in node["spaces"])
        return next(it)

    return build(schema)
