"""``copy=True`` at the speed of views: each batch handed out from a private mapping of its ring slot.

The default copy promises arrays that are the caller's: never changed later, and what the caller
writes into them reaches nothing else. Copying every batch keeps that promise at a memcpy a step
(a 210x160x3 frame batch of 8 envs: ~0.8 MB, most of the agent's time in a null env's step).

Here the observations of a slot are handed out as arrays over a private (copy-on-write) mapping
of that slot of the ring, made once per slot. Until the caller writes a page, the mapping shows the
ring's own page: nothing is copied. A page the caller writes becomes the caller's own copy, so a
write never reaches the ring (the servers, a masked reset's kept rows, a restart's last
observation read the ring as the envs wrote it). And a slot whose arrays the caller still holds
(their reference counts say so, as ``kept_views`` reads them) is never written again: the lockstep
driver steps into a free slot instead (``Lockstep._next_slot``), never into the slot of the batch
before, which a restart's last observation and a masked reset's kept rows are read from. So at
most ``ring_depth - 2`` slots are held at once: when the caller holds that many others, the batch
is copied (``ReusedCopies``) and its slot stays free, and the next call still finds a free slot
that is not this one. Before a slot is handed out again, the pages the caller wrote last time
(found in ``/proc/self/pagemap``: anonymous where the ring's are file pages) are dropped, so they
show the ring again; the lockstep driver does it while the servers write the slot, where it would
only wait for them (``prepare``).

Linux only (``/proc/self/pagemap``, ``madvise``); elsewhere, or where a mapping cannot be made,
``PrivateSlots.of`` returns None and every batch is copied.
"""

from __future__ import annotations

import mmap
import os
import sys
import weakref
from typing import Any, Callable, Optional

import numpy as np

from ..contract.kept_views import KeptViews, anchored, holders

PAGE = mmap.PAGESIZE
_PRESENT_FILE = 0xA0  # of an entry's top byte: present (bit 63) and file page (bit 61)
_ANONYMOUS, _ANONYMOUS_ONCE = 0x80, 0x81  # present, not a file page (bit 56: mapped once)


class PrivateLeaf:
    """One observation leaf of one slot, mapped privately: the array handed out and its pages."""

    def __init__(self, fd: int, offset: int, shape: tuple[int, ...], dtype: np.dtype, pagemap: int) -> None:
        start = offset - offset % mmap.ALLOCATIONGRANULARITY
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        self.map = mmap.mmap(
            fd, offset - start + nbytes, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ | mmap.PROT_WRITE, offset=start
        )
        whole = np.frombuffer(self.map, np.uint8)
        self.array = anchored(whole[offset - start : offset - start + nbytes].view(dtype).reshape(shape))
        address = int(whole.ctypes.data)
        pages = (len(self.map) + PAGE - 1) // PAGE
        self.where = 8 * (address // PAGE)  # its pagemap entries' offset
        self.pagemap = pagemap
        self.buffers = [bytearray(8 * pages)]  # read into memory allocated once
        self.clean = b""  # the entries as last read with no page written: the same again, none is

    def written(self) -> list[int]:
        """The pages the caller wrote: present and anonymous (its own copies), where the pages it
        only read are the ring's file pages (``/proc/self/pagemap``, the top byte of an entry: bit
        63 present, 61 file page, 56 mapped once)."""
        os.preadv(self.pagemap, self.buffers, self.where)
        entries = self.buffers[0]
        if entries == self.clean:  # (a compare of memory: most steps end here)
            return []
        flags = entries[7::8]  # each entry's top byte: its flags (no frame number)
        if flags.find(_ANONYMOUS) < 0 and flags.find(_ANONYMOUS_ONCE) < 0:
            self.clean = bytes(entries)
            return []
        return [page for page, byte in enumerate(flags) if (byte & _PRESENT_FILE) == _ANONYMOUS]

    def refresh(self) -> None:
        """Drop the pages the caller wrote: they show the ring's contents again."""
        for page in self.written():
            self.map.madvise(mmap.MADV_DONTNEED, page * PAGE, PAGE)


class PrivateSlots:
    """Per ring slot, the observation tree over private mappings, and whether the caller holds it."""

    def __init__(
        self, leaves: list[dict[int, PrivateLeaf]], build: Callable[[Callable[[int], np.ndarray]], Any]
    ) -> None:
        self.leaves = leaves  # [slot] -> leaf index -> its private mapping
        self.build = build  # a fresh tree of the slot's arrays (the caller may change the tree itself)
        self.depth = len(leaves)
        self.out = [False] * self.depth  # handed out since its last refresh (may show the caller's writes)
        #: Slots handed out and not seen dropped since: only these can be held (nothing hands out a
        #: reference to a slot again but ``hand_out``), so a step counts one or two, not every slot.
        self.holding: set[int] = set()
        self.kept = KeptViews("ring slot", "while the caller holds it")  # what the caller still holds
        for k, slot in enumerate(leaves):
            self.kept.watch(k, holders([leaf.array for leaf in slot.values()]))
        self._arrays = [self._getter(slot) for slot in leaves]  # leaf index -> its array, per slot
        # A one-array observation (a Box) is handed out as that array: no tree to build each step.
        single = [build(getter) for getter in self._arrays]
        self._single = single if all(isinstance(tree, np.ndarray) for tree in single) else None
        del single
        for k in range(self.depth):
            self.kept.settle(k)  # (with every reference of ours)
        self.closer: Optional[weakref.finalize[Any, Any]] = None

    @classmethod
    def of(
        cls,
        fd: Optional[int],
        fields: dict[int, dict[str, Any]],
        depth: int,
        build: Callable[[Callable[[int], np.ndarray]], Any],
    ) -> Optional[PrivateSlots]:
        """Private mappings of ``fields`` (leaf index -> the ring layout's field: offset, shape,
        dtype; its first axis the slots) of the ring segment ``fd``; None where they cannot be made."""
        if fd is None or not sys.platform.startswith("linux") or not fields:
            return None
        try:
            pagemap = os.open("/proc/self/pagemap", os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            return None
        try:
            leaves: list[dict[int, PrivateLeaf]] = [{} for _ in range(depth)]
            for index in sorted(fields):
                field = fields[index]
                dtype, shape = np.dtype(field["dtype"]), tuple(int(d) for d in field["shape"])
                slot_bytes = int(np.prod(shape[1:], dtype=np.int64)) * dtype.itemsize
                for k in range(depth):
                    offset = int(field["offset"]) + k * slot_bytes
                    leaves[k][index] = PrivateLeaf(fd, offset, shape[1:], dtype, pagemap)
            for slot in leaves:
                for leaf in slot.values():
                    leaf.written()  # (the pagemap answers)
        except (OSError, ValueError):
            os.close(pagemap)
            return None
        slots = cls(leaves, build)
        slots.closer = weakref.finalize(slots, _close_quietly, pagemap)  # (also a portal never closed)
        return slots

    @staticmethod
    def _getter(slot: dict[int, PrivateLeaf]) -> Callable[[int], np.ndarray]:
        arrays = {index: leaf.array for index, leaf in slot.items()}
        return arrays.__getitem__

    def held(self, k: int) -> bool:
        """Whether the caller still holds something of slot ``k``'s last batch (an array, a slice
        of it, a tensor over it: each holds the array or its base)."""
        if k not in self.holding:
            return False
        if self.kept.held(k):
            return True
        self.holding.discard(k)
        return False

    def free_after(self, k: int) -> Optional[int]:
        """The first slot after ``k`` (round the ring) that nothing of the caller's holds; never
        ``k`` itself (it holds the batch before, read while the next one is made)."""
        holding = self.holding
        for step in range(1, self.depth):
            j = (k + step) % self.depth
            if j not in holding or not self.held(j):
                return j
        return None

    def prepare(self, k: int) -> None:
        """Drop the pages the caller wrote into slot ``k``'s arrays when it last had them, so they
        show the ring again. The lockstep driver calls this for the slot a step writes once the
        servers are told to step (the slot is free: nothing of the caller's holds it), where the
        agent would only wait for them; ``hand_out`` does it for a slot not prepared so."""
        if self.out[k]:
            for leaf in self.leaves[k].values():
                leaf.refresh()
            self.out[k] = False

    def hand_out(self, k: int) -> Optional[Any]:
        """Slot ``k``'s observation tree over its private mappings, or None when the caller holds
        ``ring_depth - 2`` other slots (then the batch must be copied, and slot ``k`` stays free:
        handed out, the next call would find no free slot but ``k``, the batch before it). A slot
        handed out before drops the pages the caller wrote then, whenever it is handed out next."""
        holding = self.holding
        if len(holding) - (k in holding) >= self.depth - 2:  # (only then can that many others be held)
            held = 0
            for j in tuple(holding):
                if j != k and self.held(j):
                    held += 1
            if held >= self.depth - 2:
                return None
        if self.out[k]:
            self.prepare(k)
        self.out[k] = True
        holding.add(k)
        return self._single[k] if self._single is not None else self.build(self._arrays[k])

    def close(self) -> None:
        """Close the pagemap (once); the mappings go with the last array over them."""
        if self.closer is not None:
            self.closer()


def _close_quietly(fd: int) -> None:
    try:
        os.close(fd)
    except OSError:
        pass
