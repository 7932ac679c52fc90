"""Frame capture for chosen envs: a ``Recorded`` stand-in renders after each step it forwards.

The agent's ``record_frames`` turns capture on or off per env (``P.RECORD``). While it is on, the
server's stepping list holds a ``Recorded`` stand-in for that env, as sampled steps go through
``stats.Timed`` stand-ins: the step loop has no recording branch, and an env not recorded is never
rendered. The frame rides in the env's info under ``FRAME_KEY`` as plain bytes with its shape, so
the agent batches it as one object per env (not a zero-filled array for every env of the batch)
and a frame too big for the ring row travels in the step's ``EXTRA`` message, as any big info does.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .envs import LegacyEnv

FRAME_KEY = "_portal_frame"  # reserved info key; the agent's RecordVideo pops it (and its mask)


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
    """An env whose ``step`` adds the frame after the step to its info (``reset`` adds none)."""

    def __init__(self, env: Any, env_index: int) -> None:
        self.env, self.env_index = env, env_index

    def __getattr__(self, name: str) -> Any:
        return getattr(self.env, name)

    def step(self, action: Any) -> Any:
        obs, reward, terminated, truncated, info = self.env.step(action)
        info = dict(info or {})  # the env's own dict stays as it was
        info[FRAME_KEY] = frame_info(self.env.render(), self.env_index)
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


def stepping_envs(envs: list, stepping: list, positions: list, env_indices: list, on: bool) -> list:
    """The stepping list with envs ``positions`` recorded (``on``) or plain again."""
    out = list(stepping)
    for j in positions:
        if on and not isinstance(out[j], Recorded):
            out[j] = Recorded(envs[j], env_indices[j])
        elif not on:
            out[j] = envs[j]
    return out
