"""Values of a space as the flat list of its leaves and back, in the schema's leaf order.

The one walker of Dict/Tuple nesting for every side that holds a space's schema
(``portal_shm.wire.schema``): the agent writes actions leaf by leaf into the ring and rebuilds
observations from its leaf views, a host sends a batch as its leaves alone (one frame each).
"""

from __future__ import annotations

import copy
from typing import Any, Callable, Iterable

import numpy as np

from .schema import leaf_shape_dtype, leaves


def leaf_specs(schema: dict[str, Any]) -> list[tuple[tuple[int, ...], np.dtype[Any]]]:
    """(shape of one env's value, dtype) of each leaf of a fixed-layout schema."""
    return [leaf_shape_dtype(leaf) for _, leaf in leaves(schema)]


def at(value: Any, path: tuple[Any, ...]) -> Any:
    """The part of a nested value (or space) at ``path``: ``value[path[0]][path[1]]...``."""
    for part in path:
        value = value[part]
    return value


def flatten(value: Any, schema: dict[str, Any]) -> list[Any]:
    """The leaves of ``value`` in the schema's order, each as given (no conversion)."""
    if schema["kind"] not in ("Dict", "Tuple"):
        return [value]
    return [at(value, path) for path, _ in leaves(schema)]


def unflatten(items: Iterable[Any], schema: dict[str, Any]) -> Any:
    """The nested value of ``schema`` whose leaves are ``items``, in leaf order."""
    it = iter(items)

    def build(node: dict[str, Any]) -> Any:
        if node["kind"] == "Dict":
            return {key: build(sub) for key, sub in node["spaces"]}
        if node["kind"] == "Tuple":
            return tuple(build(sub) for sub in node["spaces"])
        return next(it)

    return build(schema)


def builder(schema: dict[str, Any], leaf: Callable[[int, dict[str, Any]], Any]) -> Callable[[Any], Any]:
    """``f(arg)``: the nested value of ``schema`` whose leaf ``i`` is ``leaf(i, node)(arg)``.

    The walk is done once here, so a value rebuilt every step costs only the calls.
    """
    counter = [0]

    def compile_node(node: dict[str, Any]) -> Callable[[Any], Any]:
        if node["kind"] == "Dict":
            parts = [(key, compile_node(sub)) for key, sub in node["spaces"]]
            return lambda arg: {key: build(arg) for key, build in parts}
        if node["kind"] == "Tuple":
            items = [compile_node(sub) for sub in node["spaces"]]
            return lambda arg: tuple(build(arg) for build in items)
        index = counter[0]
        counter[0] += 1
        get: Callable[[Any], Any] = leaf(index, node)
        return get

    return compile_node(schema)


def copy_tree(value: Any) -> Any:
    """A deep copy of a batch or observation: arrays copied, Dict/Tuple/GraphInstance nesting kept."""
    if isinstance(value, np.ndarray):
        return value.copy()
    if isinstance(value, dict):
        return {k: copy_tree(v) for k, v in value.items()}
    if isinstance(value, tuple):
        items = [copy_tree(v) for v in value]
        return type(value)(*items) if hasattr(value, "_fields") else tuple(items)
    return copy.deepcopy(value)
