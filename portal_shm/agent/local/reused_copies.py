"""The default copy at the speed of views: output arrays reused once the caller dropped them.

With ``copy=True`` (the default) every batch goes to the caller in arrays of its own, which the
portal never changes while the caller holds them. Fresh arrays every step cost more than the copy
itself: a batch of frames is large enough that each allocation is a fresh mapping whose pages fault
in as the copy touches them. So each array handed out is kept here too, and once its reference
count says nobody but this pool holds it (the caller dropped it and everything derived from it: a
slice, ``torch.from_numpy``, a list entry all hold a reference), the next batch is copied into it,
memory already mapped and warm. An array still held is never written: a new one is made instead.
"""

from __future__ import annotations

import sys
from typing import Any, Hashable

import numpy as np

from ...wire import trees

#: Arrays kept per leaf: the caller's current batch, the one before it (often still held while
#: the next step runs), and one spare.
KEEP = 3


class ReusedCopies:
    """Copies of observation trees into arrays handed out before and dropped since."""

    def __init__(self, keep: int = KEEP) -> None:
        self.keep = keep
        self._pools: dict[Hashable, list[np.ndarray]] = {}

    def copy(self, key: Hashable, source: np.ndarray) -> np.ndarray:
        """``source`` copied into an array of this pool nobody else holds, or into a new one."""
        pool = self._pools.get(key)
        if pool is None:
            pool = self._pools[key] = []
        for i in range(len(pool)):
            # 2: the pool's list and getrefcount's argument; any other holder makes it more
            if sys.getrefcount(pool[i]) == 2:
                free = pool[i]
                if free.shape == source.shape and free.dtype == source.dtype:
                    np.copyto(free, source)
                    return free
        out: np.ndarray = source.copy()
        if len(pool) >= self.keep:
            del pool[0]  # the oldest: now the caller's alone
        pool.append(out)
        return out

    def tree(self, value: Any, key: Hashable = ()) -> Any:
        """A deep copy of a batch's tree (``trees.copy_tree``'s), its arrays from the pool."""
        if isinstance(value, np.ndarray):
            return self.copy(key, value)
        if isinstance(value, dict):
            return {k: self.tree(v, (key, k)) for k, v in value.items()}
        if isinstance(value, tuple):
            items = [self.tree(v, (key, j)) for j, v in enumerate(value)]
            return type(value)(*items) if hasattr(value, "_fields") else tuple(items)
        return trees.copy_tree(value)
