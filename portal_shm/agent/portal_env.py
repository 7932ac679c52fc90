"""Portal: one isolated env as a plain ``gymnasium.Env`` (for SB3's ``PPO("MlpPolicy", env)`` and friends)."""

from __future__ import annotations

from typing import Any, Optional

import gymnasium
import numpy as np
from gymnasium.vector import AutoresetMode

from ..wire.trees import copy_tree
from .local.spec import EnvSpec
from .vector import VectorPortal


def _first(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _first(sub) for key, sub in value.items()}
    if isinstance(value, tuple):
        return tuple(_first(sub) for sub in value)
    return value[0]


class Portal(gymnasium.Env):
    """A single env in its own runtime; observations are returned as fresh copies.

    Built on a one-env VectorPortal without autoreset: after an episode ends, call ``reset``.
    """

    def __init__(self, spec: EnvSpec, **vector_kwargs: Any) -> None:
        vector_kwargs.setdefault("autoreset_mode", AutoresetMode.DISABLED)
        self._vector = VectorPortal([spec], **vector_kwargs)
        self._vector.raw_infos = True
        self.observation_space = self._vector.single_observation_space
        self.action_space = self._vector.single_action_space
        self.metadata = {k: v for k, v in self._vector.metadata.items() if k != "autoreset_mode"}
        self.render_mode = self._vector.render_mode
        self.spec = None
        self._batch = np.empty((1,), dtype=object)

    def reset(
        self, *, seed: Optional[int] = None, options: Optional[dict[str, Any]] = None
    ) -> tuple[Any, dict[str, Any]]:
        super().reset(seed=seed)
        obs, info = self._vector.reset(seed=[seed], options=options)
        return copy_tree(_first(obs)), info

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        batched = _batch_one(action)
        obs, reward, terminated, truncated, info = self._vector.step(batched)
        return copy_tree(_first(obs)), float(reward[0]), bool(terminated[0]), bool(truncated[0]), info

    def render(self) -> Any:
        return self._vector.render()[0]

    def call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        return self._vector.call(name, *args, **kwargs)[0]

    def close(self) -> None:
        self._vector.close()


def _batch_one(action: Any) -> Any:
    if isinstance(action, dict):
        return {key: _batch_one(sub) for key, sub in action.items()}
    if isinstance(action, tuple):
        return tuple(_batch_one(sub) for sub in action)
    return np.asarray(action)[None]
