"""One message of the host link: a msgpack header, then one raw frame per array.

Arrays never pass through msgpack: each is its own ZeroMQ frame, sent without a copy and read
with ``np.frombuffer``, compressed on its own when the connection negotiated a codec. The header
(``portal_shm.wire.protocol``: no pickle, numpy by explicit encoding) says each frame's dtype,
shape and codec. Everything decoded here came from the network: a malformed message raises
``FrameError`` naming the problem, never anything worse.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

import numpy as np

from ..wire.dtypes import RING_KINDS, allowed, safe_dtype
from ..wire.protocol import ProtocolError, packb, unpackb
from . import codecs

# The host protocol both sides check at hello; raised whenever this format changes
# (2: small arrays inline as bytes in their spec).
PROTOCOL = 2
MAX_ARRAYS = 4096
MAX_DIMS = 16


class FrameError(Exception):
    """A message of the host link that does not follow the format (corrupt, oversized, unsafe)."""


# Arrays below this travel inside the header, their bytes in the array's spec (``INLINE``): a frame
# of its own costs more than copying a few bytes, and a null env's step then crosses as one frame
# each way. (Not as msgpack's numpy extension: decoding that takes a Python hook per array.)
INLINE_BYTES = 4096
INLINE = "inline"


def pack(
    header: dict[str, Any],
    arrays: Sequence[np.ndarray] = (),
    codec: str = codecs.NONE,
    stats: Any = None,
    compressible: Optional[int] = None,
) -> list[Any]:
    """The frames of one message: the header (with the arrays' specs added) and the arrays' bytes.

    Only the first ``compressible`` arrays (all by default) may be compressed: observations, not
    the rewards and flags beside them. Every frame owns its bytes, so the arrays may change as
    soon as this returns while the frames still wait for the link.
    """
    specs, out = [], []
    limit = len(arrays) if compressible is None else compressible
    for index, array in enumerate(arrays):
        array = np.asarray(array)
        if array.nbytes < INLINE_BYTES and allowed(array.dtype, RING_KINDS):
            specs.append([array.dtype.str, list(array.shape), INLINE, array.tobytes()])
            if stats is not None and index < limit:
                stats.count(array.nbytes, array.nbytes)
            continue
        if not array.flags.c_contiguous:
            array = array.copy(order="C")  # (not ascontiguousarray: it turns 0-d arrays into 1-d)
        raw = array.reshape(-1).data.cast("B")
        used, data = codecs.NONE, None
        if codec != codecs.NONE and index < limit and array.nbytes >= codecs.MIN_BYTES:
            packed = codecs.compress(codec, raw)
            if codecs.worth(array.nbytes, len(packed)):
                used, data = codec, packed
        if data is None:
            data = raw.tobytes()
        if stats is not None and index < limit:
            stats.count(array.nbytes, len(data))
        specs.append([array.dtype.str, list(array.shape), used])
        out.append(data)
    return [packb({**header, "arrays": specs})] + out


def _dtype(descr: Any) -> np.dtype:
    dtype = safe_dtype(descr, RING_KINDS)
    if dtype is None:
        raise FrameError(f"dtype {str(descr)[:40]!r} is not allowed in a frame")
    return dtype


def _shape(shape: Any) -> tuple[Any, ...]:
    if not isinstance(shape, list) or len(shape) > MAX_DIMS:
        raise FrameError(f"invalid shape {shape!r:.80}")
    for n in shape:
        if type(n) is not int or not 0 <= n < 2**31:
            raise FrameError(f"invalid shape {shape!r:.80}")
    return tuple(shape)


def _nbytes(dtype: np.dtype, shape: tuple[Any, ...]) -> int:
    size = dtype.itemsize
    for n in shape:
        size *= n
    return size


ANY_CODEC = codecs.PREFERENCE


def message_bytes(frames: Sequence[Any]) -> int:
    """The bytes of a received message, all frames together, before anything in it is decoded."""
    return sum(len(frame) for frame in frames)


def unpack_header(frames: Sequence[Any]) -> dict[str, Any]:
    """The header of a received message, its array specs still in ``header["arrays"]`` (undecoded):
    a receiver that serves several senders looks the sender up before it decodes any array."""
    if not frames:
        raise FrameError("empty message")
    try:
        header = unpackb(frames[0].bytes if hasattr(frames[0], "bytes") else bytes(frames[0]))
    except ProtocolError as exc:
        raise FrameError(f"header does not decode: {exc}") from None
    if not isinstance(header, dict) or not isinstance(header.get("cmd"), str):
        raise FrameError(f"header is not a message: {header!r:.120}")
    return header


def unpack(
    frames: Sequence[Any],
    stats: Any = None,
    into: Optional[Sequence[np.ndarray]] = None,
    codecs_allowed: Sequence[str] = ANY_CODEC,
    max_bytes: Optional[int] = None,
) -> tuple[dict[str, Any], list[Any]]:
    """(header, arrays) of a received message; see ``unpack_arrays``."""
    header = unpack_header(frames)
    return header, unpack_arrays(header, frames, stats, into, codecs_allowed, max_bytes)


def _checked_specs(specs: Any, frame_count: int, codecs_allowed: Sequence[str], max_bytes: Optional[int]) -> list[Any]:
    """Each spec as (dtype, shape, size, codec or INLINE, inline bytes), checked before any array is
    made: the codecs the receiver agreed to, and the bytes all arrays declare against ``max_bytes``."""
    if not isinstance(specs, list) or len(specs) > MAX_ARRAYS:
        raise FrameError(f"invalid array list {specs!r:.80}")
    out, total, listed = [], 0, 0
    for spec in specs:
        if isinstance(spec, np.ndarray):  # inline: msgpack's numpy decoding checked it already
            if not allowed(spec.dtype, RING_KINDS):
                raise FrameError(f"dtype {spec.dtype} is not allowed in a message")
            out.append((spec.dtype, spec.shape, spec.nbytes, INLINE, spec))
            total += spec.nbytes
            continue
        if not isinstance(spec, list) or len(spec) not in (3, 4) or (len(spec) == 4) != (spec[2] == INLINE):
            raise FrameError(f"invalid array spec {spec!r:.80}")
        dtype, shape, codec = _dtype(spec[0]), _shape(spec[1]), spec[2]
        size = _nbytes(dtype, shape)
        if codec == INLINE:
            data = spec[3]
            if not isinstance(data, bytes) or len(data) != size:
                raise FrameError(
                    f"inline array of {len(data) if isinstance(data, bytes) else '?'} bytes for {dtype}{list(shape)}"
                )
        elif codec != codecs.NONE and codec not in codecs_allowed:
            agreed = ", ".join(codecs_allowed) or "none"
            raise FrameError(f"a frame compressed with {str(codec)[:20]!r}, which was not agreed (agreed: {agreed})")
        else:
            listed += 1
            data = None
        total += size
        out.append((dtype, shape, size, codec, data))
    if max_bytes is not None and total > max_bytes:
        raise FrameError(f"the message declares {total:,} bytes of arrays, more than the {max_bytes:,} allowed")
    if listed != frame_count:
        raise FrameError(f"the header lists {listed} array frames, the message has {frame_count}")
    return out


def unpack_arrays(
    header: dict[str, Any],
    frames: Sequence[Any],
    stats: Any = None,
    into: Optional[Sequence[np.ndarray]] = None,
    codecs_allowed: Sequence[str] = ANY_CODEC,
    max_bytes: Optional[int] = None,
) -> list[Any]:
    """The arrays of a message whose header ``unpack_header`` read; read-only views of the frames.

    Every spec is checked before anything is decoded: a frame compressed with a codec not in
    ``codecs_allowed`` (what the two sides agreed at hello) and arrays declaring more than
    ``max_bytes`` in all are refused, so a small frame that claims gigabytes is never inflated.
    Decompression writes into memory of the declared size and no more.

    ``into``: arrays the first arrays of the message may be decompressed into, each used where
    the frame is compressed and has exactly its dtype and shape (the array itself is returned).
    """
    specs = _checked_specs(header.pop("arrays", []), len(frames) - 1, codecs_allowed, max_bytes)
    arrays = []
    rest = iter(frames[1:])
    for dtype, shape, size, codec, inline in specs:
        if codec == INLINE:
            if stats is not None:
                stats.count(size, size)
            if isinstance(inline, np.ndarray):
                arrays.append(inline)
            else:
                arrays.append(np.frombuffer(inline, dtype=dtype).reshape(shape).copy())  # writable, as a ring view
            continue
        frame = next(rest)
        data = frame.buffer if hasattr(frame, "buffer") else memoryview(frame)
        wire = len(data)
        target = into[len(arrays)] if into is not None and len(arrays) < len(into) else None
        if codec != codecs.NONE and target is not None and target.dtype == dtype and target.shape == shape:
            try:
                codecs.decompress_into(codec, bytes(data), target.reshape(-1).view(np.uint8))
            except codecs.CodecError as exc:
                raise FrameError(str(exc)) from None
            if stats is not None:
                stats.count(size, wire)
            arrays.append(target)
            continue
        if codec != codecs.NONE:
            try:
                data = codecs.decompress(codec, bytes(data), size)
            except codecs.CodecError as exc:
                raise FrameError(str(exc)) from None
        if len(data) != size:
            raise FrameError(f"frame of {len(data)} bytes for an array {dtype}{list(shape)} of {size} bytes")
        if stats is not None:
            stats.count(size, wire)
        arrays.append(np.frombuffer(data, dtype=dtype).reshape(shape))
    return arrays


def expect(array: np.ndarray, dtype: np.dtype, shape: tuple[Any, ...], what: str) -> np.ndarray:
    """``array`` if it has exactly ``dtype`` and ``shape``, else FrameError naming ``what``."""
    if array.dtype != dtype or array.shape != tuple(shape):
        raise FrameError(f"{what} is {array.dtype}{list(array.shape)}, expected {np.dtype(dtype)}{list(shape)}")
    return array


class WireStats:
    """Bytes of arrays before and after compression, on one side of a link: the ratio users see."""

    def __init__(self) -> None:
        self.raw_bytes = 0
        self.wire_bytes = 0
        self.frames = 0

    def count(self, raw: int, wire: int) -> None:
        self.raw_bytes += raw
        self.wire_bytes += wire
        self.frames += 1

    def as_dict(self, codec: Optional[str] = None) -> dict[str, Any]:
        ratio = self.raw_bytes / self.wire_bytes if self.wire_bytes else 1.0
        out: dict[str, Any] = {
            "raw_bytes": self.raw_bytes,
            "wire_bytes": self.wire_bytes,
            "frames": self.frames,
            "ratio": round(ratio, 2),
        }
        if codec is not None:
            out["codec"] = codec
        return out
