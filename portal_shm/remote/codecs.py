"""Compression of observation frames between host and agent: lz4 or zstd where installed.

Atari frames compress 15-120x with lz4 and 70-1,000x with zstd level 1 at about 1 ms per 64-frame
batch, which over a 100 Mbit/s link is the difference between about 124 raw Pong frames/s and
thousands. ``"auto"`` compresses image observations: with zstd off loopback, where the ratio is
what counts, and with lz4 on loopback, where only time counts and lz4 still beats copying and
encrypting raw frames (Pong N=8 through a host on this 2-core machine: 1,781 steps/s with lz4
against 1,186 raw, both with CURVE; ``benchmarks/results/remote_loopback*``). The agent names what
it can decode; the host picks, and sends a frame raw whenever compressing it does not pay
(``worth``), so every frame says its own codec.
"""

from __future__ import annotations

import threading
from typing import Callable, Optional

import numpy as np

NONE = "none"
PREFERENCE = ("zstd", "lz4")  # zstd-1: far better ratio than lz4 at a similar cost per batch
WISHES = ("auto", NONE) + PREFERENCE
# Below this a frame goes raw: compressing a few bytes saves nothing and costs a call.
MIN_BYTES = 2048


class CodecError(Exception):
    """A frame that does not decompress to exactly the size its header promised."""


def _lz4() -> Optional[tuple]:
    try:
        import lz4.block
    except ImportError:
        return None

    def compress(data: memoryview) -> bytes:
        return lz4.block.compress(data, store_size=False)

    def decompress(data: bytes, size: int) -> bytes:
        return lz4.block.decompress(data, uncompressed_size=size)

    return compress, decompress


def _zstd() -> Optional[tuple]:
    try:
        import zstandard
    except ImportError:
        return None
    local = threading.local()  # zstandard's (de)compressors must not be shared between threads

    def compress(data: memoryview) -> bytes:
        compressor = getattr(local, "compressor", None)
        if compressor is None:
            compressor = local.compressor = zstandard.ZstdCompressor(level=1)
        return compressor.compress(data)

    def decompress(data: bytes, size: int) -> bytes:
        decompressor = getattr(local, "decompressor", None)
        if decompressor is None:
            decompressor = local.decompressor = zstandard.ZstdDecompressor()
        return decompressor.decompress(data, max_output_size=size)

    return compress, decompress


_LOADERS: dict[str, Callable[[], Optional[tuple]]] = {"lz4": _lz4, "zstd": _zstd}
_loaded: dict[str, Optional[tuple]] = {}


def _codec(name: str) -> Optional[tuple]:
    if name not in _loaded:
        _loaded[name] = _LOADERS[name]() if name in _LOADERS else None
    return _loaded[name]


def available() -> list[str]:
    """The codecs this Python can use, best first."""
    return [name for name in PREFERENCE if _codec(name) is not None]


def check_wish(wish: str) -> str:
    """``compression=`` as given to the remote backend: ``"auto"``, ``"none"`` or a codec name."""
    if wish not in WISHES:
        raise ValueError(f"compression must be one of {', '.join(WISHES)}, got {wish!r}")
    if wish in PREFERENCE and _codec(wish) is None:
        module = "zstandard" if wish == "zstd" else wish
        raise ValueError(
            f"compression={wish!r} needs the {module!r} package in the agent: pip install 'portal-shm[remote]'"
        )
    return wish


def agent_offer(wish: str, loopback: bool) -> list[str]:
    """The codecs the agent can decode and wants, best first; empty for raw frames."""
    if wish == NONE:
        return []
    if wish == "auto" and loopback:
        return [name for name in available() if name == "lz4"]
    return [wish] if wish in PREFERENCE else available()


def host_choice(offer: list, wish: object, image_obs: bool) -> str:
    """The first codec of the agent's offer the host has too (``"none"`` when there is none);
    with ``"auto"`` only for image observations, which compress 15-1,000x (others barely do)."""
    if wish == "auto" and not image_obs:
        return NONE
    for name in offer:
        if isinstance(name, str) and _codec(name) is not None:
            return name
    return NONE


def is_image(schema: dict) -> bool:
    """Whether a space (as a schema) holds an image: a uint8 Box leaf of at least two dimensions."""
    from ..wire.schema import leaves

    return any(
        leaf.get("kind") == "Box" and np.dtype(leaf.get("dtype")) == np.uint8 and len(leaf.get("shape") or ()) >= 2
        for _, leaf in leaves(schema)
    )


def compress(name: str, data: memoryview) -> bytes:
    return _codec(name)[0](data)


def worth(raw: int, packed: int) -> bool:
    """Whether sending ``packed`` bytes instead of ``raw`` is worth the agent's decompression."""
    return packed < raw * 0.9


def decompress(name: str, data: bytes, size: int) -> bytes:
    """``data`` decompressed to exactly ``size`` bytes, or CodecError: sizes are never trusted."""
    codec = _codec(name) if name in PREFERENCE else None
    if codec is None:
        raise CodecError(f"frame compressed with {name!r}, which this agent did not offer")
    try:
        out = codec[1](data, size)
    except Exception as exc:
        raise CodecError(f"{name} frame does not decompress: {exc}") from None
    if len(out) != size:
        raise CodecError(f"{name} frame decompressed to {len(out)} bytes, its header says {size}")
    return out
