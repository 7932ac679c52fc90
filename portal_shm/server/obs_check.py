"""An env's observation checked as gymnasium's ``SyncVectorEnv`` checks it, before it enters the ring.

``SyncVectorEnv`` stacks its envs' observations into its batch (``np.stack(..., out=batch)``): an
observation of another shape is refused, never broadcast (a scalar is not four copies of itself
for ``Box(4,)``), and one whose dtype numpy's ``same_kind`` rule does not cast to the space's is
refused whatever its values (any float for an integer Box, any int64 for a uint8 one), while
float64 for a float32 Box or int64 for int8 is cast as numpy casts it. A plain assignment into the
ring would broadcast and cast unsafely (300.7 into uint8 is 44), so each fixed-layout leaf of the
observation is written through a ``LeafCheck``: what Sync accepts is written as Sync writes it,
what Sync refuses is an env error.

This is the hot path: an observation that is already an ndarray of the leaf's exact shape and dtype
(CartPole's float32 array, Pong's uint8 frame) passes on three attribute tests, as does one of a
dtype already found to cast (float64 for a float32 Box) and a Python int for a Discrete; only
other values take the careful path.

Python 3.9 syntax, numpy only: this runs in env runtimes.
"""

from __future__ import annotations

from typing import Any, Tuple

import numpy as np

ndarray = np.ndarray
CASTING = "same_kind"  # what np.stack (np.concatenate) casts by when it writes into SyncVectorEnv's batch
REPR_CHARS = 80


class LeafCheck:
    """What one fixed-layout leaf of the observation space holds in the ring (its shape and dtype),
    and the dtypes already found to cast to it as ``SyncVectorEnv`` casts.

    ``check(value)`` returns what to write into the leaf's row of the ring (``value`` itself on the
    fast path), or raises ``ValueError`` (shape) or ``TypeError`` (dtype), the errors numpy raises
    in ``SyncVectorEnv``, with a message naming what the env returned and what the space wants.
    ``where`` names the leaf inside the observation (``obs['pos']``); ``batch``: the check is of
    a native batch's observations of all its envs, whose shape leads with their number.
    """

    __slots__ = ("shape", "dtype", "where", "batch", "castable", "ints")

    def __init__(self, shape: Tuple[int, ...], dtype: Any, where: str = "", batch: bool = False) -> None:
        self.shape = tuple(int(n) for n in shape)
        self.dtype = np.dtype(dtype)
        self.where = where
        self.batch = batch
        self.castable = {self.dtype}
        # A Python int (a Discrete observation, usually) is numpy's default int to np.stack: written
        # as it is where the leaf holds those (one out of their range fails the write: Sync refuses it too).
        self.ints = self.shape == () and self.dtype == np.asarray(0).dtype

    def check(self, value: Any) -> Any:
        if value.__class__ is ndarray:
            dtype = value.dtype
            if (dtype is self.dtype or dtype in self.castable) and value.shape == self.shape:
                return value
        elif value.__class__ is int and self.ints:
            return value
        return self.conform(value)

    __call__ = check

    def conform(self, value: Any) -> Any:
        """The careful path: ``value`` as numpy makes an array of it (as ``np.stack`` does), if it
        has the leaf's exact shape and a dtype that casts to the leaf's by ``same_kind``."""
        try:
            array = np.asanyarray(value)
        except Exception as exc:  # (a ragged list): np.stack fails on it in SyncVectorEnv too
            raise ValueError(self._complaint(value, f"numpy cannot make an array of it ({exc})")) from None
        if array.shape != self.shape:
            raise ValueError(
                self._complaint(
                    value,
                    "its shape differs, and SyncVectorEnv refuses any other shape (numpy does not "
                    f"broadcast into its batch); return an array of shape {self.shape}",
                )
            )
        if array.dtype not in self.castable:
            if not np.can_cast(array.dtype, self.dtype, CASTING):
                raise TypeError(
                    self._complaint(
                        value,
                        f"numpy casts {array.dtype} to {self.dtype} only unsafely (wrapping, truncating "
                        f"or rounding values), which SyncVectorEnv refuses (casting {CASTING!r}); "
                        f"return an array of dtype {self.dtype}",
                    )
                )
            self.castable.add(array.dtype)
        return array

    def _complaint(self, value: Any, why: str) -> str:
        what, verb, who, wants = "the observation", "does", "the env", "the space wants"
        if self.batch:
            what, verb, who, wants = (
                "the batch's observations",
                "do",
                "the native batch",
                f"its {self.shape[0]} envs want",
            )
        if self.where:
            what += f" at {self.where}"
        return (
            f"{what} {verb} not fit the observation space: {who} returned {describe(value)}, where {wants} "
            f"shape {self.shape} and dtype {self.dtype}; {why}"
        )


def describe(value: Any) -> str:
    """A value's type, shape, dtype and a short repr, for an error message."""
    shape, dtype = getattr(value, "shape", None), getattr(value, "dtype", None)
    if shape is None or dtype is None:
        try:
            array = np.asanyarray(value)
            shape, dtype = array.shape, array.dtype
        except Exception:
            pass
    parts = [] if shape is None else [f"shape {tuple(shape)}"]
    if dtype is not None:
        parts.append(f"dtype {dtype}")
    return f"{type(value).__qualname__} {short_repr(value)}" + (f" ({', '.join(parts)})" if parts else "")


def short_repr(value: Any) -> str:
    if isinstance(value, ndarray):
        with np.printoptions(threshold=8, edgeitems=2):
            text = repr(value)
    else:
        try:
            text = repr(value)
        except Exception as exc:
            text = f"<repr raised {type(exc).__name__}>"
    text = " ".join(text.split())
    return text if len(text) <= REPR_CHARS else text[: REPR_CHARS - 3] + "..."


def leaf_name(path: tuple) -> str:
    """A leaf's place in the observation as Python indexes it: ``obs['pos'][0]``; empty for the whole."""
    return "obs" + "".join(f"[{part!r}]" for part in path) if path else ""
