"""Where every array lives inside the shared-memory ring.

The agent computes the layout once from the spaces and sends it to every server in the attach
message, so both sides index the same bytes without recomputing anything. Each array has shape
``(depth, num_envs, *leaf_shape)``: slot ``k`` of the ring holds one whole batch, and env ``i``
writes only row ``i``. Arrays start on 64-byte boundaries so two arrays never share a cache line.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from . import stats
from .schema import is_fixed, leaf_shape_dtype, leaves

ALIGN = 64
# A server's mailbox row: 8 int64 words, one cache line, so servers never share one (the last
# three are that line's padding, and keep the indices of a row fixed across versions).
MAILBOX_FIELDS = ("cmd", "slot", "prev_slot", "status", "extra", "seq", "pid", "spare")
CMD, SLOT, STATUS, EXTRA, SEQ = (MAILBOX_FIELDS.index(name) for name in ("cmd", "slot", "status", "extra", "seq"))
STATUS_OK = 0
STATUS_ERROR = 1
STATUS_PENDING = 2
# The envs stepped and the server is writing their results (it rang early, ``CMD_RING_EARLY``):
# not finished yet, but within microseconds. Finished is OK or ERROR: a status below PENDING.
STATUS_WRITING = 3


def _align(offset: int) -> int:
    return (offset + ALIGN - 1) // ALIGN * ALIGN


def ring_layout(
    obs_schema: dict[str, Any],
    act_schema: dict[str, Any],
    num_envs: int,
    depth: int,
    num_servers: int,
    info_capacity: int,
) -> dict[str, Any]:
    """Compute the byte layout of a ring for these spaces; returns a msgpack-able dict."""
    fields: list[dict[str, Any]] = []
    offset = 0

    def add(name: str, shape: tuple[int, ...], dtype: Any) -> None:
        nonlocal offset
        dtype = np.dtype(dtype)
        offset = _align(offset)
        fields.append({"name": name, "dtype": dtype.str, "shape": list(shape), "offset": offset})
        offset += int(np.prod(shape, dtype=np.int64)) * dtype.itemsize

    for prefix, schema in (("obs", obs_schema), ("act", act_schema)):
        for index, (_, leaf) in enumerate(leaves(schema)):
            if is_fixed(leaf):
                shape, dtype = leaf_shape_dtype(leaf)
                add(f"{prefix}.{index}", (depth, num_envs) + shape, dtype)
    add("reward", (depth, num_envs), np.float64)
    add("terminated", (depth, num_envs), np.bool_)
    add("truncated", (depth, num_envs), np.bool_)
    add("info_len", (depth, num_envs), np.int64)
    add("info", (depth, num_envs, info_capacity), np.uint8)
    add("mailbox", (num_servers, len(MAILBOX_FIELDS)), np.int64)
    add("env_stats", (num_envs, len(stats.ENV_FIELDS)), np.int64)
    add("env_hist", (num_envs, stats.BUCKETS), np.int64)
    add("server_stats", (num_servers, len(stats.SERVER_FIELDS)), np.int64)
    return {
        "fields": fields,
        "size": _align(offset),
        "depth": depth,
        "num_envs": num_envs,
        "num_servers": num_servers,
        "info_capacity": info_capacity,
    }


def field_views(layout: dict[str, Any], buffer: Any) -> dict[str, np.ndarray]:
    """Numpy views of every array of the layout over ``buffer`` (an mmap of the ring)."""
    size = len(buffer)
    views = {}
    for field in layout["fields"]:
        dtype = np.dtype(field["dtype"])
        shape = tuple(int(d) for d in field["shape"])
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        offset = int(field["offset"])
        if offset < 0 or offset + nbytes > size:
            raise ValueError(f"ring field {field['name']} lies outside the {size}-byte segment")
        views[field["name"]] = np.ndarray(shape, dtype=dtype, buffer=buffer, offset=offset)
    return views
