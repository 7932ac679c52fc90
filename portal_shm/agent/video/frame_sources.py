"""Where a recorded env's frames come from: its frame ring (``FrameRings``), or its infos (``take_frames``).

How frames travel: off the step's hot path. On a local portal (``VectorPortal``, whatever its
backend: processes, venvs, containers) each recorded env gets a frame ring of its own once its first
frame told the shape (``portal_shm.wire.frames``): its server copies every frame into the next slot
and bumps a counter, and the encoder thread writes the slot's bytes straight from shared memory into
ffmpeg's pipe. Nothing of the frame is packed, sent, unpacked or batched, and the infos carry
nothing. Where the servers cannot share memory with the agent (env hosts, Ray), and for the first
frame, frames ride in the envs' infos (a frame too big for the ring row in the step's control
message, never in the ring's observation slots) and the wrapper takes them out.

``RecordVideo`` follows the episodes and decides which env captures and when.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from ...errors import EnvError, ServerProtocolError
from ...wire.frames import FrameRing
from ..contract.base import PortalVectorEnv
from .encoder import SharedFrames

FRAME_KEY = "_portal_frame"  # what env servers put frames under (portal_shm/server/recording.py)
FRAME_MASK = "_" + FRAME_KEY


def take_frames(infos: dict[str, Any]) -> dict[int, dict[str, Any]]:
    """Remove the frames (and their masks) from a batch's infos: batch position -> frame entry.

    A frame sits at the top level, or in ``final_info`` for the step that ended an episode with
    ``SameStep`` autoreset (the server resets the env in that same step)."""
    found: dict[int, dict[str, Any]] = {}
    for holder in (infos, infos.get("final_info")):
        if not isinstance(holder, dict) or FRAME_KEY not in holder:
            continue
        entries, mask = holder.pop(FRAME_KEY), holder.pop(FRAME_MASK, None)
        if not isinstance(entries, dict) or mask is None:
            raise ServerProtocolError("an env server sent frames that are not one entry per env")
        for position in np.flatnonzero(mask).tolist():
            found[position] = {key: entries[key][position] for key in ("shape", "data") if key in entries}
    return found


class FrameRings:
    """The frame rings of a local portal's recorded envs: made once an env's first frame told its
    shape, handed to its server with the word to capture."""

    def __init__(self, enabled: bool) -> None:
        self._enabled = enabled  # False: the servers cannot map the agent's memory (or the caller said no)
        self._rings: list[FrameRing] = []
        self._refused: set[int] = set()  # envs whose servers could not map a frame ring

    def wanted(self, env_index: int) -> bool:
        """Whether env ``env_index``'s frames should move to a frame ring (they came in its infos)."""
        return self._enabled and env_index not in self._refused

    def create(self, env_index: int, shape: tuple[int, ...], depth: int) -> SharedFrames:
        ring = FrameRing.create(f"portal-shm-frames-env{env_index}", shape, depth)
        self._rings.append(ring)
        return SharedFrames(ring, env_index)

    def hand(self, local: PortalVectorEnv, shared: SharedFrames) -> bool:
        """Capture on in ``shared``'s env of the ``local`` portal, into its ring (its next frame
        numbered as the wrapper counts); False where its server cannot map the ring: it refused it
        (the warning says why), and the env's frames travel in its infos, for good."""
        assert self._enabled  # only a local portal's envs get frame rings
        i = shared.env_index
        try:
            local.record_frames_shared([i], [shared.ring], [shared.seen])
        except EnvError as exc:
            warnings.warn(
                f"RecordVideo: env {i}'s server could not map its frame ring ({exc.remote_message}); "
                "its frames travel in its infos",
                RuntimeWarning,
                stacklevel=3,
            )
            self._refused.add(i)
            return False
        return True

    def close(self) -> None:
        """Close every ring's descriptor (the servers may still hold their own mappings)."""
        for ring in self._rings:
            ring.close()
        self._rings.clear()
