"""ale_py's own vector env (``ale_py.vector_env.AtariVectorEnv``) as a benchmark system.

ALE's C++ vector env steps its emulators in threads inside the agent's process (no isolation),
preprocessing in C++ too. Here it is set to the raw frame of ``ALE/<Game>-v5`` (210x160 RGB, one
frame, frameskip 4, sticky actions 0.25, no no-ops, no FIRE reset, no clipping) with a thread per
core, so the work per step is comparable with the other systems'; what still differs lands in the
report's notes (:func:`differences`).
"""

from __future__ import annotations

import os
from typing import Any, Optional

import numpy as np

from ..wire.ale_settings import rom_name as ale_rom_name
from ..wire.ale_settings import vector_settings
from .options import BenchOptions
from .scenarios import TRAINING_KWARGS, Scenario

ALE_V5_RAW = dict(
    img_height=210,
    img_width=160,
    grayscale=False,
    stack_num=1,
    frameskip=4,
    maxpool=True,
    noop_max=0,
    use_fire_reset=False,
    episodic_life=False,
    reward_clipping=False,
    repeat_action_probability=0.25,
    max_num_frames_per_episode=108_000,
    full_action_space=False,
)


# envpool's Atari defaults in ALE's vector env's words (the ``training:`` scenarios): what a
# portal's ``presets.atari_vector`` gives ALE for them, less the game.
_TRAINING_SETTINGS = vector_settings("ALE/Pong-v5", TRAINING_KWARGS)
assert isinstance(_TRAINING_SETTINGS, dict), _TRAINING_SETTINGS  # (a reason string where they do not map)
ALE_TRAINING = {key: value for key, value in _TRAINING_SETTINGS.items() if key != "game"}


def rom_name(sc: Scenario) -> Optional[str]:
    """ALE's ROM name of the scenario's game (``ALE/SpaceInvaders-v5`` -> ``space_invaders``)."""
    task = sc.envpool_task()
    return None if task is None else ale_rom_name(task)


def unsupported(sc: Scenario) -> Optional[str]:
    if sc.is_null:
        return "ALE's vector env has no null env (it steps emulators only); transport cost is not comparable"
    if rom_name(sc) is None:
        return f"no ALE vector env counterpart for {sc.name}: the harness maps ALE/<Game>-v5 only"
    return None


def differences(sc: Scenario) -> Optional[str]:
    if unsupported(sc) is not None:
        return None
    if sc.is_training:
        return (
            f"ale_py AtariVectorEnv({rom_name(sc)!r}) with envpool's Atari defaults (84x84 grey, stack 4, FIRE and "
            f"no-ops at reset, no sticky actions), {os.cpu_count()} threads inside the agent process, no isolation"
        )
    return (
        f"ale_py AtariVectorEnv({rom_name(sc)!r}): 210x160 RGB, frameskip 4, sticky actions 0.25, no no-ops, "
        "as ALE v5; it max-pools the last two frames of each frameskip, returns (1, 210, 160, 3) frames, "
        f"runs {os.cpu_count()} threads inside the agent process (its agent CPU share counts them) and has no isolation"
    )


class AleVector:
    """``AtariVectorEnv`` with the vector API the harness steps (lockstep), plus ``async_reset`` and
    ``send``/``recv`` for async batches: ALE applies a ``send`` to the envs of the last batch it
    handed out, which is the batch the harness answers. ``config``: its settings (``ALE_V5_RAW``
    unless told; benchmarks/atari_training_config.py gives envpool's Atari defaults)."""

    def __init__(self, sc: Scenario, n: int, options: BenchOptions, config: Optional[dict] = None) -> None:
        from ale_py.vector_env import AtariVectorEnv

        reason = unsupported(sc)
        if reason:
            raise ValueError(reason)
        self.num_envs = n
        self.batch_size = options.batch_size or n
        self.seed = options.seed
        self._env = AtariVectorEnv(
            rom_name(sc),
            n,
            batch_size=self.batch_size,
            num_threads=os.cpu_count() or 1,
            **(config or (ALE_TRAINING if sc.is_training else ALE_V5_RAW)),
        )
        self.single_action_space = self._env.single_action_space
        self.single_observation_space = self._env.single_observation_space
        self.action_space = self._env.action_space
        self.observation_space = self._env.observation_space
        self._first: Optional[tuple] = None

    def reset(self, seed: Any = None, options: Any = None) -> tuple:
        if self.batch_size < self.num_envs:  # async batches start with async_reset
            return None, {}
        return self._env.reset(seed=self.seed if seed is None else seed)

    def step(self, actions: Any) -> tuple:
        return self._env.step(np.asarray(actions))

    def async_reset(self) -> None:
        obs, info = self._env.reset(seed=self.seed)  # hands out the first batch; the others follow by recv
        size = len(info["env_id"])
        self._first = (obs, np.zeros(size), np.zeros(size, bool), np.zeros(size, bool), info)

    def send(self, actions: Any, env_ids: Any) -> None:
        self._env.send(np.asarray(actions))

    def recv(self) -> tuple:
        if self._first is not None:
            first, self._first = self._first, None
            return first
        return self._env.recv()

    def close(self) -> None:
        self._env.close()
