"""Checks of the values an agent sends a host: plain data of bounded size, and the vector options
a host's local portal takes, each against its type and range.

An agent's hello is decoded msgpack, so its values are already data (no callables, no pickles); what
is left to bound is their size and shape (a 1 GB string, a list nested a thousand deep) and, for
the vector options, the resources they make the host allocate (a ring of ``info_capacity`` bytes
per env and ``ring_depth`` slots). Every failure is a ``HostPolicyError`` naming the value.
"""

from __future__ import annotations

import keyword
import numbers
from typing import Any

import numpy as np

from ...agent.contract.options import HOST_BOUNDS, HOSTED, VectorOptions
from ...errors import HostPolicyError
from ...wire.dtypes import MESSAGE_KINDS, allowed
from ...wire.protocol import packb

MAX_DEPTH = 8
MAX_ITEMS = 1024  # entries of one list or dict
MAX_PACKED_BYTES = 64 * 1024  # all env kwargs together, as msgpack
MAX_NAME = 100  # characters of a keyword or attribute name


def check_name(name: Any, what: str) -> str:
    """A public Python identifier: what keyword arguments and attributes an agent may name."""
    if (
        not isinstance(name, str)
        or not name.isidentifier()
        or keyword.iskeyword(name)
        or len(name) > MAX_NAME
        or name.startswith("_")
    ):
        raise HostPolicyError(
            f"{what} {str(name)[:MAX_NAME]!r} is not a public Python name: hosts accept identifiers that do not start "
            "with '_' (private and dunder names reach into the env's internals)"
        )
    return name


def check_plain(value: Any, what: str, max_bytes: int = MAX_PACKED_BYTES) -> Any:
    """``value`` if it is plain data (None, bool, numbers, str, bytes, small numpy values, and
    lists and dicts of those with string keys), at most ``MAX_DEPTH`` deep, ``MAX_ITEMS`` wide and
    ``max_bytes`` packed."""
    _walk(value, what, 0)
    try:
        size = len(packb(value))
    except (TypeError, ValueError, OverflowError) as exc:
        raise HostPolicyError(f"{what} is not plain data a host can pass on: {exc}") from None
    if size > max_bytes:
        raise HostPolicyError(f"{what} is {size:,} bytes packed; a host takes at most {max_bytes:,}")
    return value


def _walk(value: Any, what: str, depth: int) -> None:
    if depth > MAX_DEPTH:
        raise HostPolicyError(f"{what} nests deeper than {MAX_DEPTH} levels")
    if isinstance(value, int) and not isinstance(value, bool) and not -(2**63) <= value < 2**64:
        raise HostPolicyError(f"{what} holds an integer outside 64 bits")
    if value is None or isinstance(value, (bool, numbers.Number, str, bytes, np.generic)):
        return
    if isinstance(value, np.ndarray):
        if not allowed(value.dtype, MESSAGE_KINDS):
            raise HostPolicyError(f"{what} holds an array of dtype {value.dtype}")
        return
    if isinstance(value, (list, tuple)):
        items: Any = value
    elif isinstance(value, dict):
        for key in value:
            if not isinstance(key, str):
                raise HostPolicyError(f"{what} has a key of type {type(key).__name__}; keys must be strings")
        items = value.values()
    else:
        raise HostPolicyError(f"{what} holds a {type(value).__name__}, not plain data")
    if len(value) > MAX_ITEMS:
        raise HostPolicyError(f"{what} has {len(value)} entries in one list or dict; a host takes at most {MAX_ITEMS}")
    for item in items:
        _walk(item, what, depth + 1)


# -- the vector options of the host's local portal --------------------------------------------


def check_vector_options(vector: Any, num_envs: int) -> dict[str, Any]:
    """The agent's ``vector_kwargs`` for the host's local portal: the options a host applies
    (``HOSTED``), checked as every portal checks them, under the host's bounds."""
    if vector is None:
        return {}
    try:
        VectorOptions.of(num_envs, vector, HOST_BOUNDS, HOSTED)
    except (TypeError, ValueError) as exc:
        raise HostPolicyError(str(exc)) from None
    return dict(vector)
