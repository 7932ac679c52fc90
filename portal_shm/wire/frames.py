"""A recorded env's frame ring: the side channel its server renders into, beside the main ring.

A frame is 100 KB and more, and recording one env must not slow the others: a frame that rides in
the env's info is packed with msgpack on the server, copied into the info row or sent over ZeroMQ,
unpacked and batched into object arrays on the agent, every step, while every other server waits.
Here the agent creates one small segment per recorded env (a sealed memfd, as ``ring`` creates the
main one, handed over the same way: ``handoff``), ``depth`` frames deep; the server copies frame
``n`` into slot ``n % depth`` and then stores ``n + 1`` in the header's ``WRITTEN`` word. That is
all of a frame's trip: no message, no packing, and the info carries nothing.

Who may write what: the server writes the slots and ``WRITTEN``; the agent only reads them. It
never lets the server overwrite a slot that is still to be encoded: before it posts a step that may
render frame ``n`` it waits until frame ``n - depth`` has been handed to the encoder (the slot's
bytes are then in ffmpeg's pipe), so the server needs no word from the agent and a hostile one can
spoil nothing but its own env's video. The agent checks that ``WRITTEN`` moves by at most one per
step of the env.
"""

from __future__ import annotations

import mmap
import os
from typing import Any, Optional

import numpy as np

from .ring import create_segment

HEADER_BYTES = 64  # one cache line: the WRITTEN word (and room), apart from the frames
WRITTEN = 0  # header word: frames the server has written, numbered from 0 since the ring was made


def ring_bytes(shape: tuple[int, ...], depth: int) -> int:
    """The segment's size for ``depth`` uint8 frames of ``shape`` (each slot 64-byte aligned)."""
    return HEADER_BYTES + depth * slot_bytes(shape)


def slot_bytes(shape: tuple[int, ...]) -> int:
    return (int(np.prod(shape)) + 63) // 64 * 64


def check_geometry(shape: Any, depth: Any) -> tuple[tuple[int, ...], int]:
    """``shape`` and ``depth`` as the other side sent them, checked (a frame is (H, W) or (H, W, C))."""
    if not isinstance(shape, (list, tuple)) or len(shape) not in (2, 3):
        raise ValueError(f"a frame ring's frames are (H, W) or (H, W, C), not {shape!r:.60}")
    dims = tuple(int(d) for d in shape)
    if not all(0 < d < 1 << 16 for d in dims) or not 0 < int(depth) <= 4096:
        raise ValueError(f"a frame ring of {depth!r:.20} frames of shape {dims} is out of bounds")
    return dims, int(depth)


class FrameRing:
    """One mapped frame ring: ``depth`` slots of uint8 frames of ``shape``, and the ``WRITTEN`` word.

    ``fd`` stays open on the agent (it hands a copy to each server that records into the ring);
    a server closes it once mapped. The slots are views of the mapping: ``close`` drops the ring's
    references and the mapping goes once the last view does (as ``Ring.close``, never unmapped
    under a view).
    """

    def __init__(self, fd: int, shape: tuple[int, ...], depth: int) -> None:
        self.shape, self.depth = check_geometry(shape, depth)
        self.fd: Optional[int] = fd
        self.frame_bytes = int(np.prod(self.shape))
        self.slot_bytes = slot_bytes(self.shape)
        size = ring_bytes(self.shape, self.depth)
        held = os.fstat(fd).st_size
        if held < size:
            raise ValueError(f"the frame ring's segment holds {held} bytes, {depth} frames of {shape} need {size}")
        self._mmap: Optional[mmap.mmap] = mmap.mmap(fd, size)
        self._words = np.frombuffer(self._mmap, np.uint64, HEADER_BYTES // 8)
        self._bytes = memoryview(self._mmap)
        self._slots = [
            np.frombuffer(self._mmap, np.uint8, self.frame_bytes, HEADER_BYTES + k * self.slot_bytes).reshape(
                self.shape
            )
            for k in range(self.depth)
        ]

    @classmethod
    def create(cls, name: str, shape: tuple[int, ...], depth: int) -> "FrameRing":
        """A new ring in a new sealed memfd (zero-filled: ``WRITTEN`` is 0)."""
        dims, depth = check_geometry(shape, depth)
        fd = create_segment(name, ring_bytes(dims, depth))
        try:
            return cls(fd, dims, depth)
        except BaseException:
            os.close(fd)
            raise

    def written(self) -> int:
        """Frames written so far (the header's word, as the server last stored it)."""
        return int(self._words[WRITTEN])

    def slot(self, n: int) -> np.ndarray:
        """The (writable) view that frame ``n`` goes into."""
        return self._slots[n % self.depth]

    def frame_bytes_of(self, n: int) -> memoryview:
        """Frame ``n``'s bytes, a view of the mapping (valid until the server writes frame ``n + depth``)."""
        start = HEADER_BYTES + (n % self.depth) * self.slot_bytes
        return self._bytes[start : start + self.frame_bytes]

    def publish(self, n: int) -> None:
        """Server side: frames up to ``n - 1`` are in their slots (stored after the frame's bytes)."""
        self._words[WRITTEN] = n

    def close_fd(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def close(self) -> None:
        self.close_fd()
        self._slots = []
        self._bytes = memoryview(b"")
        self._words = np.zeros(1, np.uint64)
        self._mmap = None
