"""Which numpy dtypes may cross from an untrusted peer (an env server, an env host), checked once.

Two allow-lists, one rule: ``RING_KINDS`` for what lives in the ring and in a host's array frames
(numbers and booleans), ``MESSAGE_KINDS`` for arrays inside msgpack messages (infos may also carry
complex numbers and fixed-width strings). Never objects, structured or sub-array dtypes, and a
descriptor longer than any real one is refused before numpy parses it.
"""

from __future__ import annotations

from typing import Any, Optional

import numpy as np

RING_KINDS = frozenset("biuf?")
MESSAGE_KINDS = RING_KINDS | frozenset("cSU")
MAX_DESCRIPTOR = 16

# (descriptor, kinds) -> dtype: every step's messages repeat the same few
_checked: dict[tuple[str, frozenset[str]], np.dtype] = {}


def safe_dtype(descr: Any, kinds: frozenset[str] = RING_KINDS) -> Optional[np.dtype]:
    """The dtype of the descriptor ``descr`` (``"<f4"``), or None when it is not one of ``kinds``."""
    key = (descr, kinds)
    dtype = _checked.get(key) if isinstance(descr, str) else None
    if dtype is not None:
        return dtype
    if not isinstance(descr, str) or len(descr) > MAX_DESCRIPTOR:
        return None
    try:
        dtype = np.dtype(descr)
    except (TypeError, ValueError):
        return None
    if not allowed(dtype, kinds):
        return None
    if len(_checked) < 128:
        _checked[key] = dtype
    return dtype


def allowed(dtype: np.dtype, kinds: frozenset[str] = RING_KINDS) -> bool:
    """Whether an array or scalar already built has a dtype of ``kinds`` (plain, not structured)."""
    return dtype.kind in kinds and dtype.fields is None and dtype.subdtype is None
