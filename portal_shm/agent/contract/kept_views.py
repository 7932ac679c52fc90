"""Views a portal hands out with ``copy=False``, and who still holds them when their memory is reused.

With ``copy=False`` a batch is a view of memory the portal writes again ``ring_depth`` calls later
(a ring slot, or an array a remote reply decompresses into). A client that keeps such a view (a
replay buffer holding references, ``torch.from_numpy``, a list of batches) would see it change
under it. Every view handed out is one object the portal made once and keeps (so handing it out
costs nothing), and the base of whatever is derived from it (slices, tensors): its reference count
says whether anyone besides the portal still holds it. Just before the memory is written again the
count is compared with the portal's own references; the first time a client's reference is found, a
``KeptViewWarning`` says what to do. The default, ``copy=True``, hands out fresh arrays and needs
none of this.

The views are writable, as ``AsyncVectorEnv(copy=False)``'s arrays of its shared memory are (code
and gymnasium's own tests write into them: ``obs[0] = 0``, a normalisation in place): the memory is
the agent's own mapping of the ring, and a write changes only that slot's rows until the servers
write the slot again. Nothing the portal decides is read from a slot after it was handed out, with
one exception: an env whose server is restarted ends its episode on its last observation, read
from the slot handed out last (``RingViews.truncate``), with what the client wrote into it.
"""

from __future__ import annotations

import inspect
import os
import sys
import warnings
from typing import Any, Hashable, Optional

import numpy as np

_PACKAGE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))) + os.sep


def _client_level() -> int:
    """The ``stacklevel`` of the first caller outside this package (the client's own line)."""
    frame, level = inspect.currentframe(), 0
    while frame is not None and (level < 2 or frame.f_code.co_filename.startswith(_PACKAGE)):
        frame, level = frame.f_back, level + 1
    return level


class KeptViewWarning(RuntimeWarning):
    """A view returned with ``copy=False`` was still referenced when its memory was written again."""


def anchored(view: np.ndarray) -> np.ndarray:
    """An array over ``view``'s (C-contiguous) memory, whose base is an array of its own.

    numpy names the outermost array as the base of a slice of a slice, so whatever a client takes
    from a plain ``ring[k]`` would point at the whole ring and no count would show it. Here the
    base is an array made over a memoryview (where the collapse stops), private to this one view:
    slices of the view hold the base, tensors and the client's names hold the view itself, and
    ``holders`` watches both."""
    base = np.frombuffer(view.data.cast("B"), view.dtype)
    return base.reshape(view.shape)


def holders(arrays: list[np.ndarray]) -> list[Any]:
    """What to watch for ``arrays`` handed out (each made by ``anchored``, or owning its memory):
    each array, and its base where it has one."""
    return [obj for array in arrays for obj in (array, array.base) if obj is not None]


def _counts(objects: list[Any]) -> list[int]:
    """Each object's reference count, taken the same way every time (so counts compare)."""
    return [sys.getrefcount(objects[i]) for i in range(len(objects))]


class KeptViews:
    """The objects handed out per reusable place (a slot), with the references the portal holds.

    ``watch(place, objects)`` registers what a place hands out; ``settle(place)`` takes the counts
    as they are when nothing of it is out (the portal's own references: caches, trees); and
    ``check(place)``, called before the place is written again, reports a client's reference.
    """

    def __init__(self, what: str, valid_for: str) -> None:
        self.what = what  # "ring slot", "reply array": the memory that is reused
        self.valid_for = valid_for  # how long a view stays valid, for the message
        self._objects: dict[Hashable, list[Any]] = {}
        self._counts: dict[Hashable, Optional[list[int]]] = {}
        self.reported = False

    def watch(self, place: Hashable, objects: list[Any]) -> None:
        """What ``place`` hands out from now on; its baseline is taken by ``settle`` or the first
        ``check`` (which must come before anything of it is handed out)."""
        self._objects[place] = list(objects)
        self._counts[place] = None

    def settle(self, place: Hashable) -> None:
        """Take ``place``'s counts now: nothing of it may be out (the portal's caches are built)."""
        self._counts[place] = _counts(self._objects[place])

    def held(self, place: Hashable) -> bool:
        """Whether a client holds one of ``place``'s objects now (a count above the settled one);
        allocates nothing, for a check every step."""
        objects, counts = self._objects[place], self._counts[place]
        assert counts is not None  # (settled once the portal's own references were made)
        for i in range(len(objects)):
            if sys.getrefcount(objects[i]) > counts[i]:
                return True
        return False

    def check(self, place: Hashable) -> None:
        """Before ``place`` is written again: warn once if a client still holds one of its views."""
        objects = self._objects.get(place)
        if objects is None or self.reported:
            return
        counts, now = self._counts[place], _counts(objects)
        if counts is None:
            self._counts[place] = now
            return
        for i in range(len(objects)):
            if now[i] > counts[i]:
                self.report(objects[i])
                return

    def report(self, obj: Any) -> None:
        self.reported = True
        kind = f"an array of shape {obj.shape}" if isinstance(obj, np.ndarray) else f"a {type(obj).__name__}"
        warnings.warn(
            f"{kind} that this portal returned as a view (copy=False) is still referenced, and its "
            f"{self.what} is being written again now, so it changes under whoever holds it: views stay "
            f"valid for {self.valid_for}. Copy what you keep (np.array(obs), torch.tensor(obs), a "
            "rollout buffer's own storage), or leave copy at its default (True) for arrays that never "
            "change (reported once per portal)",
            KeptViewWarning,
            stacklevel=_client_level(),
        )
