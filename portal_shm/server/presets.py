"""Training presets that run on the env side: preprocessing where the env lives, not in the agent.

Entry points for ``make_vec``, e.g. ``make_vec("portal_shm.presets:atari", 8, backend="docker",
image="portal-shm/ale", env_id="ALE/Breakout-v5")``. Downscaling, grayscale, frame skipping and
frame stacking happen inside the env's runtime, so the ring (and the agent) only ever carries the
84x84x4 bytes a policy looks at instead of 210x160x3 frames it would throw away.

This module is imported inside env runtimes (images, old interpreters): Python 3.9 syntax and
only gymnasium and numpy. Resizing is numpy-only (an exact area average), because the env images
carry no OpenCV, which gymnasium's own ``AtariPreprocessing`` and ``ResizeObservation`` need.
"""

from __future__ import annotations

from typing import Any, Optional

import gymnasium as gym
import numpy as np
from gymnasium.wrappers import FrameStackObservation


def area_weights(source: int, target: int) -> np.ndarray:
    """``(target, source)`` weights: each output pixel averages the input pixels it covers.

    The same pixel footprints as OpenCV's ``INTER_AREA`` when shrinking, including fractional
    overlaps at the edges (210 rows into 84 covers 2.5 rows per output row).
    """
    if target > source:
        raise ValueError(f"area_weights shrinks only: {source} -> {target}")
    scale = source / target
    weights = np.zeros((target, source), np.float32)
    for out in range(target):
        start, end = out * scale, (out + 1) * scale
        for src in range(int(np.floor(start)), min(source, int(np.ceil(end)))):
            overlap = min(end, src + 1) - max(start, src)
            if overlap > 0:
                weights[out, src] = overlap / scale
    return weights


class AreaResize:
    """Shrinks ``(H, W)`` or ``(H, W, C)`` uint8 frames to ``(h, w[, C])`` by area averaging.

    Each output pixel reads only the few input rows and columns it covers (at most
    ``ceil(H / h) + 1`` per axis): a handful of gathers and multiply-adds per axis. Deliberately
    no matrix product: BLAS spreads even a tiny product over threads, and on a loaded machine with
    one env server per core those threads wait on each other (the whole ViZDoom preset stepped 4x
    slower that way here).
    """

    def __init__(self, source_hw: tuple, target_hw: tuple) -> None:
        self.rows = _taps(area_weights(source_hw[0], target_hw[0]))
        self.cols = _taps(area_weights(source_hw[1], target_hw[1]))

    def __call__(self, frame: np.ndarray) -> np.ndarray:
        rows = _shrink_first_axis(frame.astype(np.float32), self.rows)
        out = _shrink_first_axis(np.ascontiguousarray(rows.swapaxes(0, 1)), self.cols).swapaxes(0, 1)
        return np.clip(np.rint(out), 0, 255).astype(np.uint8)


def _taps(weights: np.ndarray) -> tuple:
    """A ``(target, source)`` weight matrix as ``(index, weight)`` arrays of shape ``(taps, target)``."""
    taps = int((weights > 0).sum(axis=1).max())
    index = np.zeros((taps, weights.shape[0]), np.intp)
    value = np.zeros((taps, weights.shape[0]), np.float32)
    for out, row in enumerate(weights):
        nonzero = np.flatnonzero(row)
        index[: len(nonzero), out] = nonzero
        value[: len(nonzero), out] = row[nonzero]
    return index, value


def _shrink_first_axis(pixels: np.ndarray, taps: tuple) -> np.ndarray:
    index, weight = taps
    weight = weight.reshape(weight.shape + (1,) * (pixels.ndim - 1))
    out = pixels[index[0]] * weight[0]
    for t in range(1, index.shape[0]):
        out += pixels[index[t]] * weight[t]
    return out


def grayscale(frame: np.ndarray) -> np.ndarray:
    """ITU-R 601 luma of an ``(H, W, 3)`` RGB frame, as uint8 (what ALE's grayscale mode gives)."""
    luma = frame[..., 0] * np.float32(0.299) + frame[..., 1] * np.float32(0.587) + frame[..., 2] * np.float32(0.114)
    return np.clip(np.rint(luma), 0, 255).astype(np.uint8)


class AtariFrames(gym.Wrapper):
    """The usual Atari preprocessing (Machado et al. 2018 / Mnih et al. 2015), numpy only.

    The wrapped ALE env must run with ``frameskip=1`` and ``obs_type="grayscale"``. On reset: up to
    ``noop_max`` random no-ops. On step: the action repeats ``frame_skip`` times, rewards are summed
    and the last two frames max-pooled (Atari sprites flicker), then the frame is shrunk to
    ``screen_size``. ``terminal_on_life_loss`` ends the episode when a life is lost (the game is
    then reset on the next reset, as gymnasium's ``AtariPreprocessing`` does).
    """

    def __init__(
        self,
        env: gym.Env,
        noop_max: int = 30,
        frame_skip: int = 4,
        screen_size: int = 84,
        terminal_on_life_loss: bool = False,
    ) -> None:
        super().__init__(env)
        shape = env.observation_space.shape
        if shape is None or len(shape) != 2:
            raise ValueError(
                f"AtariFrames needs grayscale frames (H, W); got observation space {env.observation_space}"
            )
        if frame_skip < 1:
            raise ValueError(f"frame_skip must be at least 1, got {frame_skip}")
        self.noop_max = noop_max
        self.frame_skip = frame_skip
        self.terminal_on_life_loss = terminal_on_life_loss
        self.resize = AreaResize(shape, (screen_size, screen_size))
        self.frames = np.zeros((2,) + tuple(shape), np.uint8)
        self.lives = 0
        self.observation_space = gym.spaces.Box(0, 255, (screen_size, screen_size), np.uint8)

    def _ale(self) -> Any:
        return self.env.unwrapped.ale

    def _observe(self) -> np.ndarray:
        return self.resize(np.maximum(self.frames[0], self.frames[1]) if self.frame_skip > 1 else self.frames[1])

    def reset(self, *, seed: Optional[int] = None, options: Optional[dict] = None) -> tuple:
        obs, info = self.env.reset(seed=seed, options=options)
        noops = int(self.np_random.integers(0, self.noop_max + 1)) if self.noop_max > 0 else 0
        for _ in range(noops):
            obs, _, terminated, truncated, info = self.env.step(0)
            if terminated or truncated:
                obs, info = self.env.reset()
        self.lives = self._ale().lives()
        self.frames[0] = 0
        self.frames[1] = obs
        return self._observe(), info

    def step(self, action: Any) -> tuple:
        total = 0.0
        terminated = truncated = False
        info: dict = {}
        for t in range(self.frame_skip):
            obs, reward, terminated, truncated, info = self.env.step(action)
            total += float(reward)
            if self.terminal_on_life_loss:
                lives = self._ale().lives()
                terminated = terminated or lives < self.lives
                self.lives = lives
            if terminated or truncated:
                self.frames[1] = obs
                break
            if t >= self.frame_skip - 2:
                self.frames[t - (self.frame_skip - 2)] = obs
        return self._observe(), total, terminated, truncated, info


def atari(
    env_id: str = "ALE/Pong-v5",
    *,
    noop_max: int = 30,
    frame_skip: int = 4,
    screen_size: int = 84,
    terminal_on_life_loss: bool = False,
    stack: int = 4,
    **kwargs: Any,
) -> gym.Env:
    """An ALE game with the usual preprocessing: observations ``(stack, screen_size, screen_size)`` uint8.

    ``kwargs`` go to ALE (``repeat_action_probability``, ``full_action_space``, ``mode`` ...); v5's
    sticky actions (0.25) stay on unless overridden.
    """
    import ale_py

    gym.register_envs(ale_py)
    env = gym.make(env_id, frameskip=1, obs_type="grayscale", **kwargs)
    env = AtariFrames(
        env,
        noop_max=noop_max,
        frame_skip=frame_skip,
        screen_size=screen_size,
        terminal_on_life_loss=terminal_on_life_loss,
    )
    return FrameStackObservation(env, stack) if stack > 1 else env


class ScreenOnly(gym.ObservationWrapper):
    """ViZDoom's dict observation reduced to its screen, shrunk to ``size`` and channels first.

    Grayscale gives ``(h, w)``; RGB gives ``(3, h, w)``, the layout torch convolutions take.
    """

    def __init__(self, env: gym.Env, size: tuple = (60, 80)) -> None:
        super().__init__(env)
        screen = env.observation_space["screen"]
        height, width, channels = screen.shape
        self.gray = channels == 1
        self.resize = AreaResize((height, width), size)
        shape = tuple(size) if self.gray else (channels,) + tuple(size)
        self.observation_space = gym.spaces.Box(0, 255, shape, np.uint8)

    def observation(self, observation: dict) -> np.ndarray:
        screen = observation["screen"]
        if self.gray:
            return self.resize(screen[..., 0])
        return np.ascontiguousarray(self.resize(screen).transpose(2, 0, 1))


def vizdoom(
    env_id: str = "VizdoomBasic-v1",
    *,
    frame_skip: int = 4,
    size: tuple = (60, 80),
    grayscale: bool = True,
    stack: int = 4,
    **kwargs: Any,
) -> gym.Env:
    """A ViZDoom scenario for pixel-based training: the screen only, small, skipped and stacked.

    The engine renders at 160x120 (cheaper than the scenario's 320x240) in GRAY8 or RGB24, and
    repeats each action for ``frame_skip`` tics (rewards summed by ViZDoom). Observations:
    ``(stack, h, w)`` grayscale or ``(stack, 3, h, w)`` RGB, uint8. ``kwargs`` go to the
    gymnasium env (and from there into ViZDoom's config).
    """
    import vizdoom as vzd
    import vizdoom.gymnasium_wrapper  # noqa: F401  (registers the Vizdoom* ids)

    from .envs import prepare_vizdoom

    prepare_vizdoom()

    screen_format = vzd.ScreenFormat.GRAY8 if grayscale else vzd.ScreenFormat.RGB24
    options = {"screen_resolution": vzd.ScreenResolution.RES_160X120, "screen_format": screen_format, **kwargs}
    env = gym.make(env_id, frame_skip=frame_skip, **options)
    env = ScreenOnly(env, tuple(size))
    return FrameStackObservation(env, stack) if stack > 1 else env
