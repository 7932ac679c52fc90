"""The stable entry-point path of the training presets (``make_vec("portal_shm.presets:atari", ...)``).

The presets run on the env side and live in ``portal_shm.server.presets``; this name stays so that
configs, scripts and images that spell the short path keep working.
"""

from __future__ import annotations

from .server.presets import (
    AreaResize,
    AtariFrames,
    ScreenOnly,
    StackFrames,
    area_weights,
    atari,
    atari_vector,
    grayscale,
    vizdoom,
)

__all__ = [
    "AreaResize",
    "AtariFrames",
    "ScreenOnly",
    "StackFrames",
    "area_weights",
    "atari",
    "atari_vector",
    "grayscale",
    "vizdoom",
]
