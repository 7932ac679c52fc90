"""Frame capture for chosen envs: a ``Recorded`` stand-in renders after each step it forwards.

The agent's ``record_frames`` turns capture on or off per env (``P.RECORD``). While it is on, the
server's stepping list holds a ``Recorded`` stand-in for that env, as sampled steps go through
``stats.Timed`` stand-ins: the step loop has no recording branch, and an env not recorded is never
rendered.

Where a frame goes: into the env's frame ring when the agent handed one over with the RECORD
message (``portal_shm.wire.frames``: one copy into shared memory, a counter bumped, nothing in the
info), which a local portal does once it knows the frame's shape. Otherwise, and for any frame
whose shape or dtype is not the ring's, it rides in the env's info under ``FRAME_KEY`` as plain
bytes with its shape: the agent batches it as one object per env (not a zero-filled array for
every env of the batch), and a frame too big for the ring row travels in the step's ``EXTRA``
message, as any big info does. Env hosts and Ray portals relay frames that way.
"""

from __future__ import annotations

import os
from typing import Any, Optional

import numpy as np

from ..wire.frames import FrameRing, check_geometry
from ..wire.handoff import fetch_descriptors
from ..wire.protocol import ProtocolError
from .envs import LegacyEnv

FRAME_KEY = "_portal_frame"  # reserved info key; the agent's RecordVideo pops it (and its mask)
FETCH_TIMEOUT_SECONDS = 10.0


def frame_info(frame: Any, env_index: int) -> dict:
    """``render()``'s result as the info entry the agent decodes: shape, dtype and raw bytes."""
    if not isinstance(frame, np.ndarray) or frame.dtype != np.uint8 or frame.ndim not in (2, 3):
        what = type(frame).__name__ if not isinstance(frame, np.ndarray) else f"an array {frame.dtype}{frame.shape}"
        raise ValueError(
            f"env {env_index}'s render() returned {what}; recording needs an rgb_array frame, a uint8 array "
            "(H, W, 3) or (H, W): make the env with render_mode='rgb_array'"
        )
    return {"shape": list(frame.shape), "dtype": "uint8", "data": np.ascontiguousarray(frame).tobytes()}


class Recorded:
    """An env whose ``step`` renders the frame after the step (``reset`` renders none): into
    ``frames`` (numbered from ``next_frame``) where it fits, else into the step's info."""

    def __init__(self, env: Any, env_index: int, frames: Optional[FrameRing] = None, next_frame: int = 0) -> None:
        self.env, self.env_index = env, env_index
        self.frames, self.next_frame = frames, next_frame

    def __getattr__(self, name: str) -> Any:
        return getattr(self.env, name)

    def step(self, action: Any) -> Any:
        obs, reward, terminated, truncated, info = self.env.step(action)
        frame = self.env.render()
        ring = self.frames
        if ring is not None and isinstance(frame, np.ndarray) and frame.shape == ring.shape and frame.dtype == np.uint8:
            np.copyto(ring.slot(self.next_frame), frame)
            self.next_frame += 1
            ring.publish(self.next_frame)
            return obs, reward, terminated, truncated, info
        info = dict(info or {})  # the env's own dict stays as it was
        info[FRAME_KEY] = frame_info(frame, self.env_index)
        return obs, reward, terminated, truncated, info

    def reset(self, **kwargs: Any) -> Any:
        return self.env.reset(**kwargs)


def check_renders(env: Any, env_index: int) -> None:
    """Refuse to record an env that cannot hand out frames, before any step depends on it."""
    mode = getattr(env, "render_mode", None)
    if mode == "rgb_array" or (mode is None and isinstance(env, LegacyEnv)):  # legacy gym: render(mode=...)
        return
    raise ValueError(
        f"env {env_index} cannot be recorded: its render_mode is {mode!r}, frames need 'rgb_array'; "
        "make the portal with render_mode='rgb_array' (make_vec(..., render_mode='rgb_array'))"
    )


def frame_rings(message: dict, positions: list) -> dict:
    """The frame rings a RECORD message hands over: {position: (ring, number of its next frame)}.

    ``frames`` holds one entry (or None) per env of ``envs``: the agent's socket, a one-time token
    and the ring's geometry. The socket sends the main ring's descriptor first, as at attach: this
    server has that one mapped already and closes the copy."""
    entries = message.get("frames")
    if entries is None:
        return {}
    if not isinstance(entries, list) or len(entries) != len(positions):
        raise ProtocolError("a RECORD message's frames are not one entry per env")
    rings: dict = {}
    for j, entry in zip(positions, entries):
        if entry is None:
            continue
        if not isinstance(entry, dict) or not isinstance(entry.get("next"), int) or entry["next"] < 0:
            raise ProtocolError("a malformed frame ring entry in a RECORD message")
        shape, depth = check_geometry(entry.get("shape"), entry.get("depth"))
        segment, fd = fetch_descriptors(str(entry.get("path")), str(entry.get("token")), 2, FETCH_TIMEOUT_SECONDS)
        os.close(segment)
        try:
            ring = FrameRing(fd, shape, depth)
        except BaseException:
            os.close(fd)
            raise
        ring.close_fd()  # mapped: the mapping keeps the segment
        rings[j] = (ring, entry["next"])
    return rings


def stepping_envs(envs: list, stepping: list, positions: list, env_indices: list, on: bool, rings: dict) -> list:
    """The stepping list with envs ``positions`` recorded (``on``) or plain again; an env given a
    frame ring in ``rings`` gets a stand-in writing into it, the others keep theirs."""
    out = list(stepping)
    for j in positions:
        if on and j in rings:
            out[j] = Recorded(envs[j], env_indices[j], *rings[j])
        elif on and not isinstance(out[j], Recorded):
            out[j] = Recorded(envs[j], env_indices[j])
        elif not on:
            out[j] = envs[j]
    return out
