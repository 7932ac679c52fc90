"""Compression of observation frames between host and agent: lz4 or zstd where installed.

Atari frames compress by one to three orders of magnitude (zstd level 1 far more than lz4) at
about a millisecond per batch, which over a 100 Mbit/s link is the difference between about a
hundred raw Pong frames/s and thousands. ``"auto"`` compresses image observations: with zstd off
loopback, where the ratio is what counts, and with lz4 on loopback, where only time counts and lz4
still beats copying and encrypting raw frames (README "Envs on another machine" and
``benchmarks/results/remote_loopback*`` have the figures). The agent names what
it can decode; the host picks, and sends a frame raw whenever compressing it does not pay
(``worth``), so every frame says its own codec.
"""

from __future__ import annotations

import threading
from typing import Any, Callable, Optional

import numpy as np

NONE = "none"
PREFERENCE = ("zstd", "lz4")  # zstd-1: far better ratio than lz4 at a similar cost per batch
WISHES = ("auto", NONE) + PREFERENCE
# Below this a frame goes raw: compressing a few bytes saves nothing and costs a call.
MIN_BYTES = 2048


class CodecError(Exception):
    """A frame that does not decompress to exactly the size its header promised."""


def _lz4() -> Optional[tuple[Any, ...]]:
    try:
        import lz4.block
    except ImportError:
        return None
    safe = _lz4_decompress_safe()

    def compress(data: memoryview) -> bytes:
        packed: bytes = lz4.block.compress(data, store_size=False)
        return packed

    def into(data: bytes, out: np.ndarray) -> None:
        if safe is None or out.nbytes > _INT_MAX:
            out[...] = np.frombuffer(lz4.block.decompress(data, uncompressed_size=out.nbytes), np.uint8)
            return
        written = safe(data, out.ctypes.data, len(data), out.nbytes)
        if written != out.nbytes:
            raise CodecError(f"lz4 frame does not decompress to {out.nbytes} bytes ({written})")

    return compress, into


_INT_MAX = 2**31 - 1


def _lz4_decompress_safe() -> Optional[Callable[..., Any]]:
    """LZ4's own ``LZ4_decompress_safe`` (never writes past the capacity it is given), as
    python-lz4's extension exports it, to decompress into one array of ours.

    ``lz4.block.decompress`` allocates the output twice and copies it: for a Pong batch (800 KB)
    each allocation is fresh memory of its own, and on a VM the page faults on it cost many
    times the decompression into one reused array. Where the symbol is missing, python-lz4's
    call does the work.
    """
    try:
        import ctypes

        import lz4.block._block as block

        function = ctypes.CDLL(block.__file__).LZ4_decompress_safe
    except (ImportError, OSError, AttributeError):
        return None
    function.restype = ctypes.c_int
    function.argtypes = [ctypes.c_char_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_int]
    return function


def _zstd() -> Optional[tuple[Any, ...]]:
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

    def into(data: bytes, out: np.ndarray) -> None:
        decompressor = getattr(local, "decompressor", None)
        if decompressor is None:
            decompressor = local.decompressor = zstandard.ZstdDecompressor()
        with decompressor.stream_reader(data) as reader:
            written = reader.readinto(out)
            extra = reader.read(1)
        if written != out.nbytes or extra:
            raise CodecError(f"zstd frame does not decompress to {out.nbytes} bytes")

    return compress, into


_LOADERS: dict[str, Callable[[], Optional[tuple[Any, ...]]]] = {"lz4": _lz4, "zstd": _zstd}
_loaded: dict[str, Optional[tuple[Any, ...]]] = {}


def _codec(name: str) -> Optional[tuple[Any, ...]]:
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


def host_choice(offer: list[Any], wish: object, image_obs: bool) -> str:
    """The first codec of the agent's offer the host has too (``"none"`` when there is none);
    with ``"auto"`` only for image observations, which compress 15-1,000x (others barely do)."""
    if wish == "auto" and not image_obs:
        return NONE
    for name in offer:
        if isinstance(name, str) and _codec(name) is not None:
            return name
    return NONE


def is_image(schema: dict[str, Any]) -> bool:
    """Whether a space (as a schema) holds an image: a uint8 Box leaf of at least two dimensions."""
    from ..wire.schema import leaves

    return any(
        leaf.get("kind") == "Box" and np.dtype(leaf.get("dtype")) == np.uint8 and len(leaf.get("shape") or ()) >= 2
        for _, leaf in leaves(schema)
    )


def compress(name: str, data: memoryview) -> bytes:
    codec = _codec(name)
    if codec is None:
        raise ValueError(f"codec {name!r} is not available in this Python (available: {', '.join(available())})")
    packed: bytes = codec[0](data)
    return packed


def worth(raw: int, packed: int) -> bool:
    """Whether sending ``packed`` bytes instead of ``raw`` is worth the agent's decompression."""
    return packed < raw * 0.9


def decompress(name: str, data: bytes, size: int) -> Any:
    """``data`` decompressed to exactly ``size`` bytes (a uint8 array), or CodecError: sizes are
    never trusted. The output is ``size`` bytes allocated first and filled by a decompressor that
    stops at its end (a frame that would inflate further is an error, not a bigger buffer); the
    caller bounds ``size`` before calling."""
    out = np.empty(size, np.uint8)
    decompress_into(name, data, out)
    return out


def decompress_into(name: str, data: bytes, out: np.ndarray) -> None:
    """``data`` decompressed into ``out`` (a C-contiguous uint8 array), which it must fill exactly,
    or CodecError. Fresh memory for each decompressed batch costs page faults that dwarf the
    decompression itself (a Pong batch: 800 KB, ~200 faults); arrays that are reused do not."""
    codec = _codec(name) if name in PREFERENCE else None
    if codec is None:
        raise CodecError(f"frame compressed with {name!r}, which this agent did not offer")
    try:
        codec[1](data, out)
    except CodecError:
        raise
    except Exception as exc:
        raise CodecError(f"{name} frame does not decompress: {exc}") from None
