"""Training presets that run on the env side: preprocessing where the env lives, not in the agent.

Entry points for ``make_vec``, e.g. ``make_vec("portal_shm.presets:atari", 8, backend="docker",
image="portal-shm/ale", env_id="ALE/Breakout-v5")``. Downscaling, grayscale, frame skipping and
frame stacking happen inside the env's runtime, so the ring (and the agent) only ever carries the
84x84x4 bytes a policy looks at instead of 210x160x3 frames it would throw away.

This module is imported inside env runtimes (images, old interpreters): Python 3.9 syntax and
only gymnasium and numpy. Resizing is numpy-only (an exact area average), because the env images
carry no OpenCV, which gymnasium's own ``AtariPreprocessing`` and ``ResizeObservation`` need.

``atari()``'s defaults beside envpool's Atari defaults (``portal_shm.envpool.make("Pong-v5")``
passes envpool's, so scripts written for envpool see the same games)::

    what                    atari() default              envpool default
    frames stacked          stack=4                      stack_num=4
    frame size              screen_size=84 (or (h, w))   img_height=84, img_width=84
    colour                  grayscale=True               gray_scale=True (RGB: (3*stack, h, w))
    action repeat           frame_skip=4, max of last 2  frame_skip=4, max of last 2
    no-ops at reset         noop_min=0 .. noop_max=30    1 .. noop_max=30 (noop_min=1)
    FIRE at reset           fire_reset=False             use_fire_reset=True (as the last no-op)
    lost life               plays on (both flags False)  episodic_life=False
    reward                  the game's                   reward_clip=False (raw in info["reward"])
    sticky actions          0.25 (ALE v5's)              repeat_action_probability=0.0
    time limit              ALE's 108,000 frames         max_episode_steps=27000 agent steps
    action set              minimal                      full_action_space=False
    resizing                exact area average           OpenCV INTER_AREA (use_inter_area_resize)

Frames match envpool's only up to resizing: the area average here and OpenCV's differ by at most
one grey level on some pixels (rounding), and the random no-op counts come from another generator.
"""

from __future__ import annotations

from collections import deque
from typing import Any, Optional, Union

import gymnasium as gym
import numpy as np
from gymnasium.wrappers import FrameStackObservation

from .native import PerEnv, batched
from .pixels import area_taps, area_weights, block_average, power_of_two_blocks, shrink_first_axis
from .pixels import grayscale as grayscale  # (portal_shm.presets' name for it)


# Here, beside its users, not in pixels.py: server/state/wrappers.py names it by its full name (a
# configuration, which an exact restart's state leaves out).
class AreaResize:
    """Shrinks ``(H, W)`` or ``(H, W, C)`` uint8 frames to ``(h, w[, C])`` by area averaging.

    Each output pixel reads only the few input rows and columns it covers (at most
    ``ceil(H / h) + 1`` per axis): a handful of gathers and multiply-adds per axis. Deliberately
    no matrix product: BLAS spreads even a tiny product over threads, and on a loaded machine with
    one env server per core those threads wait on each other (the whole ViZDoom preset stepped 4x
    slower that way here).
    """

    def __init__(self, source_hw: tuple, target_hw: tuple) -> None:
        self.rows = area_taps(area_weights(source_hw[0], target_hw[0]))
        self.cols = area_taps(area_weights(source_hw[1], target_hw[1]))
        self.blocks = power_of_two_blocks(source_hw, target_hw)

    def __call__(self, frame: np.ndarray) -> np.ndarray:
        if self.blocks is not None:
            return block_average(frame, *self.blocks)
        rows = shrink_first_axis(frame.astype(np.float32), self.rows)
        out = shrink_first_axis(np.ascontiguousarray(rows.swapaxes(0, 1)), self.cols).swapaxes(0, 1)
        return np.clip(np.rint(out), 0, 255).astype(np.uint8)


class AtariFrames(gym.Wrapper):
    """The usual Atari preprocessing (Machado et al. 2018 / Mnih et al. 2015), numpy only.

    The wrapped ALE env must run with ``frameskip=1`` and ``obs_type="grayscale"`` (frames ``(h, w)``)
    or ``"rgb"`` (frames ``(3, h, w)``, channels first as convolutions take them). On reset:
    ``noop_min`` to ``noop_max`` random no-ops, the last of them replaced by FIRE if ``fire_reset``
    and the game has FIRE (games such as Breakout wait for it to launch the ball).
    On step: the action repeats ``frame_skip`` times, rewards are summed and the last two frames
    max-pooled (Atari sprites flicker), then the frame is shrunk to ``screen_size``.

    A lost life ends the episode in one of two ways. ``terminal_on_life_loss`` (gymnasium's
    ``AtariPreprocessing``): the next reset restarts the game, so a return covers one life and
    ``lives`` never reaches 0. ``episodic_life`` (envpool's): the next reset continues the same
    game (no-ops and FIRE again, ``continued`` is then True) and only a game over, a truncation or
    a seeded reset restarts it, so the learner sees one episode per life while the game's score and
    ``info["lives"]`` run on to the real game over (``lives == 0``), where returns are counted.

    ``reward_clip`` returns the reward's sign, ``info["reward"]`` the game's own. ``max_episode_steps``
    truncates a game after that many agent steps, counted across its lives (envpool's
    ``elapsed_step``). ``envpool_infos`` replaces ALE's infos by envpool's: ``lives``, ``reward``
    (unclipped), ``terminated`` (1 at game over, 0 at a lost life) and ``elapsed_step``.

    Where the wrapped env is ale_py's own ``AtariEnv`` (discrete actions, no sound), a step plays
    its frames on the emulator directly (``direct``): what ``AtariEnv.step`` does per frame, less
    the screen of every frame (only the last two are pooled, and they are written into this
    wrapper's buffers) and the wrappers' per-frame calls. Same frames, rewards and flags, checked
    against the frame-by-frame path in tests/unit/server/test_presets_direct.py; a Pong step 1.11x faster
    here (benchmarks/atari_direct_frames.py).
    """

    def __init__(
        self,
        env: gym.Env,
        noop_max: int = 30,
        frame_skip: int = 4,
        screen_size: Union[int, tuple] = 84,
        terminal_on_life_loss: bool = False,
        *,
        noop_min: int = 0,
        episodic_life: bool = False,
        reward_clip: bool = False,
        fire_reset: bool = False,
        max_episode_steps: Optional[int] = None,
        envpool_infos: bool = False,
    ) -> None:
        super().__init__(env)
        shape = env.observation_space.shape
        if shape is None or len(shape) not in (2, 3) or (len(shape) == 3 and shape[2] != 3):
            raise ValueError(
                f"AtariFrames needs grayscale (H, W) or RGB (H, W, 3) frames; got observation space {env.observation_space}"
            )
        if frame_skip < 1:
            raise ValueError(f"frame_skip must be at least 1, got {frame_skip}")
        if not 0 <= noop_min <= noop_max:
            raise ValueError(
                f"no-ops are drawn from [noop_min, noop_max]: got noop_min={noop_min}, noop_max={noop_max}"
            )
        if episodic_life and terminal_on_life_loss:
            raise ValueError(
                "episodic_life and terminal_on_life_loss both end the episode at a lost life; pass one: "
                "episodic_life continues the game at the next reset (envpool), terminal_on_life_loss restarts it"
            )
        if max_episode_steps is not None and max_episode_steps < 1:
            raise ValueError(f"max_episode_steps must be at least 1 (or None), got {max_episode_steps}")
        size = (screen_size, screen_size) if isinstance(screen_size, int) else tuple(screen_size)
        self.noop_min = noop_min
        self.noop_max = noop_max
        self.frame_skip = frame_skip
        self.terminal_on_life_loss = terminal_on_life_loss
        self.episodic_life = episodic_life
        self.reward_clip = reward_clip
        self.max_episode_steps = max_episode_steps
        self.envpool_infos = envpool_infos
        meanings = env.unwrapped.get_action_meanings()
        self.fire_action = meanings.index("FIRE") if fire_reset and "FIRE" in meanings else None
        self.rgb = len(shape) == 3
        self.resize = AreaResize(shape[:2], size)
        self.frames = np.zeros((2,) + tuple(shape), np.uint8)
        self.direct = _direct_ale(env)
        self.lives = 0
        self.elapsed_step = 0
        self.game_ended = True  # the next reset restarts the game (always before the first)
        self.continued = False  # the last reset continued a game after a lost life (read by StackFrames)
        self.observation_space = gym.spaces.Box(0, 255, ((3,) + size) if self.rgb else size, np.uint8)

    def _ale(self) -> Any:
        return self.env.unwrapped.ale

    def _observe(self) -> np.ndarray:
        frame = self.resize(np.maximum(self.frames[0], self.frames[1]) if self.frame_skip > 1 else self.frames[1])
        return np.ascontiguousarray(frame.transpose(2, 0, 1)) if self.rgb else frame

    def _info(self, info: dict, reward: float, game_over: bool) -> dict:
        if self.envpool_infos:
            lives = self._ale().lives()
            return {"lives": lives, "reward": reward, "terminated": int(game_over), "elapsed_step": self.elapsed_step}
        if self.reward_clip:
            info = {**info, "reward": reward}
        return info

    def reset(self, *, seed: Optional[int] = None, options: Optional[dict] = None) -> tuple:
        self.continued = self.episodic_life and seed is None and not self.game_ended
        obs: Optional[np.ndarray] = None
        info: dict = {}
        if not self.continued:
            obs, info = self.env.reset(seed=seed, options=options)
            self.elapsed_step = 0
        high = self.noop_max + 1
        noops = int(self.np_random.integers(self.noop_min, high)) if self.noop_max > self.noop_min else self.noop_min
        if self.fire_action is not None:  # FIRE takes the last no-op's place, as envpool counts them
            actions = [0] * max(noops - 1, 0) + [self.fire_action]
        else:
            actions = [0] * noops
        for action in actions:
            obs, _, terminated, truncated, info = self.env.step(action)
            if terminated or truncated:
                obs, info = self.env.reset()
                self.elapsed_step, self.continued = 0, False
        if obs is None:  # a continued game without no-ops or FIRE: the screen as it stands
            ale = self._ale()
            obs = ale.getScreenRGB() if self.rgb else ale.getScreenGrayscale()
            info = {
                "lives": ale.lives(),
                "episode_frame_number": ale.getEpisodeFrameNumber(),
                "frame_number": ale.getFrameNumber(),
            }
        self.lives = self._ale().lives()
        self.game_ended = False
        self.frames[0] = 0
        self.frames[1] = obs
        return self._observe(), self._info(info, 0.0, False)

    def step(self, action: Any) -> tuple:
        if self.direct:
            return self._step_direct(action)
        total = 0.0
        game_over = terminated = truncated = False
        info: dict = {}
        for t in range(self.frame_skip):
            obs, reward, game_over, truncated, info = self.env.step(action)
            total += float(reward)
            terminated = game_over
            if self.terminal_on_life_loss:
                lives = self._ale().lives()
                terminated = terminated or lives < self.lives
                self.lives = lives
            if terminated or truncated:
                self.frames[1] = obs
                break
            if t >= self.frame_skip - 2:
                self.frames[t - (self.frame_skip - 2)] = obs
        return self._agent_step(total, bool(game_over), terminated, bool(truncated), info)

    def _step_direct(self, action: Any) -> tuple:
        """``step`` on ale_py's emulator itself (``direct``): the same frames as the path above."""
        base = self.env.unwrapped
        ale = base.ale
        action_index = base._action_set[action]  # noqa: SLF001  (the action table AtariEnv.step reads; _direct_ale checks it)
        screen = ale.getScreenRGB if self.rgb else ale.getScreenGrayscale
        total = 0.0
        game_over = terminated = truncated = False
        for t in range(self.frame_skip):
            total += ale.act(action_index, 1.0)
            game_over = terminated = ale.game_over(with_truncation=False)
            truncated = ale.game_truncated()
            if self.terminal_on_life_loss:
                lives = ale.lives()
                terminated = terminated or lives < self.lives
                self.lives = lives
            if terminated or truncated:
                screen(self.frames[1])
                break
            if t >= self.frame_skip - 2:
                screen(self.frames[t - (self.frame_skip - 2)])
        info = {
            "lives": ale.lives(),
            "episode_frame_number": ale.getEpisodeFrameNumber(),
            "frame_number": ale.getFrameNumber(),
        }
        return self._agent_step(total, bool(game_over), bool(terminated), bool(truncated), info)

    def _agent_step(self, total: float, game_over: bool, terminated: bool, truncated: bool, info: dict) -> tuple:
        """What one agent step returns once its frames are played: the lives, time and reward rules."""
        self.elapsed_step += 1
        if self.episodic_life:  # as envpool: judged once per agent step, a bonus life is no loss
            lives = self._ale().lives()
            terminated = terminated or 0 < lives < self.lives
            self.lives = lives
        if self.max_episode_steps is not None and self.elapsed_step >= self.max_episode_steps:
            terminated, truncated = False, True  # as envpool: the time limit wins over the game's end
        self.game_ended = bool(game_over or truncated)
        reward = float(np.sign(total)) if self.reward_clip else total
        return self._observe(), reward, terminated, truncated, self._info(info, total, bool(game_over))


def _direct_ale(env: gym.Env) -> bool:
    """Whether ``AtariFrames`` may play frames on the emulator itself: ``env`` is ale_py's
    ``AtariEnv`` (not a subclass that may change a step), one frame per step, discrete actions,
    screens without sound, and the wrappers above it only gymnasium's checkers."""
    try:
        from ale_py.env import AtariEnv
    except ImportError:
        return False
    base = env.unwrapped
    if type(base) is not AtariEnv:
        return False
    layer = env
    while layer is not base:
        if type(layer).__name__ not in ("OrderEnforcing", "PassiveEnvChecker"):
            return False
        layer = layer.env
    return (
        getattr(base, "_frameskip", None) == 1
        and getattr(base, "continuous", True) is False
        and getattr(base, "sound_obs", True) is False
        and getattr(base, "_obs_type", None) in ("grayscale", "rgb")
        and hasattr(base, "_action_set")
    )


class StackFrames(gym.Wrapper):
    """The last ``stack`` observations, oldest first: what ``FrameStackObservation`` gives (a reset
    fills the stack with its observation), except after a reset that continued a game
    (``AtariFrames.continued``, episodic life), which keeps the frames before it, as envpool does.
    """

    def __init__(self, env: gym.Env, stack: int) -> None:
        super().__init__(env)
        space = env.observation_space
        self.stack = stack
        self.frames: deque = deque(maxlen=stack)
        self.observation_space = gym.spaces.Box(
            np.repeat(space.low[None], stack, axis=0), np.repeat(space.high[None], stack, axis=0), dtype=space.dtype
        )

    def reset(self, *, seed: Optional[int] = None, options: Optional[dict] = None) -> tuple:
        obs, info = self.env.reset(seed=seed, options=options)
        if getattr(self.env, "continued", False) and len(self.frames) == self.stack:
            self.frames.append(obs)
        else:
            self.frames.extend([obs] * self.stack)
        return np.stack(self.frames), info

    def step(self, action: Any) -> tuple:
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.frames.append(obs)
        return np.stack(self.frames), reward, terminated, truncated, info


def _counts(low: int = 1, **values: Any) -> None:
    """Each of ``values`` an int of at least ``low``: checked before anything is built (a wrong
    type or a negative stack fails here, not as an odd numpy error deep in a wrapper)."""
    for name, value in values.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ValueError(f"{name}={value!r:.40}: give an integer of at least {low}")


def _sizes(**values: Any) -> None:
    """Each of ``values`` a frame size: a positive int, or a pair of them (h, w)."""
    for name, value in values.items():
        items = list(value) if isinstance(value, (list, tuple)) else [value]
        if len(items) not in (1, 2) or any(isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in items):
            raise ValueError(f"{name}={value!r:.40}: give a positive integer or a pair (height, width) of them")


def atari(
    env_id: str = "ALE/Pong-v5",
    *,
    noop_max: int = 30,
    frame_skip: int = 4,
    screen_size: Union[int, tuple] = 84,
    terminal_on_life_loss: bool = False,
    stack: int = 4,
    grayscale: bool = True,
    noop_min: int = 0,
    episodic_life: bool = False,
    reward_clip: bool = False,
    fire_reset: bool = False,
    max_episode_steps: Optional[int] = None,
    envpool_infos: bool = False,
    **kwargs: Any,
) -> gym.Env:
    """An ALE game with the usual preprocessing: observations ``(stack, h, w)`` grayscale or
    ``(stack, 3, h, w)`` RGB, uint8 (``screen_size``: ``h = w`` or ``(h, w)``).

    ``kwargs`` go to ALE (``repeat_action_probability``, ``full_action_space``, ``mode`` ...); v5's
    sticky actions (0.25) stay on unless overridden. The other flags are ``AtariFrames``'; their
    defaults, and envpool's, are in the module docstring. ``max_episode_steps`` replaces ALE's own
    limit (v5: 108,000 frames, no-ops included) unless ``max_num_frames_per_episode`` is given too.
    """
    _counts(stack=stack, frame_skip=frame_skip)
    _counts(noop_max=noop_max, noop_min=noop_min, low=0)
    _sizes(screen_size=screen_size)
    import ale_py

    gym.register_envs(ale_py)
    if max_episode_steps is not None:
        kwargs.setdefault("max_num_frames_per_episode", 0)  # 0: ALE sets no limit of its own
    env = gym.make(env_id, frameskip=1, obs_type="grayscale" if grayscale else "rgb", **kwargs)
    env = AtariFrames(
        env,
        noop_max=noop_max,
        frame_skip=frame_skip,
        screen_size=screen_size,
        terminal_on_life_loss=terminal_on_life_loss,
        noop_min=noop_min,
        episodic_life=episodic_life,
        reward_clip=reward_clip,
        fire_reset=fire_reset,
        max_episode_steps=max_episode_steps,
        envpool_infos=envpool_infos,
    )
    return StackFrames(env, stack) if stack > 1 else env


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
    _counts(stack=stack, frame_skip=frame_skip)
    _sizes(size=size)
    if not isinstance(size, (list, tuple)):
        raise ValueError(f"size={size!r:.40}: give the frame's (height, width)")
    import vizdoom as vzd
    import vizdoom.gymnasium_wrapper  # noqa: F401  (registers the Vizdoom* ids)

    from .envs import prepare_vizdoom

    prepare_vizdoom()

    screen_format = vzd.ScreenFormat.GRAY8 if grayscale else vzd.ScreenFormat.RGB24
    options = {"screen_resolution": vzd.ScreenResolution.RES_160X120, "screen_format": screen_format, **kwargs}
    env = gym.make(env_id, frame_skip=frame_skip, **options)
    env = ScreenOnly(env, tuple(size))
    return FrameStackObservation(env, stack) if stack > 1 else env


@batched(per_env=atari)
def atari_vector(
    num_envs: int = 1, env_id: str = "ALE/Pong-v5", *, num_threads: int = 0, num_servers: int = 1, **options: Any
) -> Any:
    """``atari``'s envs, all of an env server's stepped by ALE's own vector env (ale_py >= 0.10
    ``AtariVectorEnv``: frame skip, max-pool, grey, resize and stack in C++, one call per step),
    where this runtime has it and ``options`` map onto it (``native_ale.vector_settings``); else
    ``num_envs`` of ``atari(env_id, **options)`` (numpy), and ``stats()`` says why.

    A batched entry point: ``make_vec("portal_shm.presets:atari_vector", n, env_id=...)`` calls it
    once per env server. Its envs have no per-env state or frames (ALE's vector env keeps none):
    restarts and recycling end their episodes. ``num_threads``: ALE's threads in each server; 0 (the
    default) shares the cores the server may run on among the ``num_servers`` env servers of its
    portal there (its server passes that): at least one thread each, at most one per env. (A thread
    per core in every server ran ~2 % slower in batches, 18 % slower in lockstep over two servers.)
    """
    _counts(num_envs=num_envs, num_servers=num_servers)
    _counts(num_threads=num_threads, low=0)
    probe = dict(options)
    for key in ("stack", "frame_skip"):
        if key in probe:
            _counts(**{key: probe[key]})
    for key in ("noop_max", "noop_min"):
        if key in probe:
            _counts(**{key: probe[key]}, low=0)
    if "screen_size" in probe:
        _sizes(screen_size=probe["screen_size"])
    from .native_ale import atari_batch

    batch = atari_batch(num_envs, env_id, num_threads, num_servers, options)
    if isinstance(batch, str):
        return PerEnv([atari(env_id, **options) for _ in range(num_envs)], batch)
    return batch
