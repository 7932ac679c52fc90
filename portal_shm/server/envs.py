"""Turning an env spec into a live env inside the env runtime, whatever gym flavour it has.

Runs on the env side: imports gymnasium or legacy ``gym`` only when the spec needs them, so a
runtime with only one of them (or neither, for an entry point) works.
"""

from __future__ import annotations

import importlib
import inspect
import os
from typing import Any, Callable

from .import_path import import_failure

# Env ids whose registration lives in a plugin package that must be imported first.
PLUGIN_MODULES = (
    ("ALE/", "ale_py"),
    ("Vizdoom", "vizdoom.gymnasium_wrapper"),
    ("MiniGrid-", "minigrid"),
    ("BabyAI-", "minigrid"),
    ("FlappyBird", "flappy_bird_gymnasium"),
    ("Craftium", "craftium"),
    ("procgen", "procgen"),
)


class EnvNotFound(Exception):
    """The spec names an env id or entry point that this runtime cannot find; the message says what
    was searched and what to do (the agent adds only the runtime's name)."""


REGISTERED_ADVICE = (
    "install the package that registers it in that runtime, or pass an entry point 'package.module:callable'"
)


def load_entry_point(entry_point: str) -> Callable[..., Any]:
    module_name, _, attr = entry_point.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise EnvNotFound(import_failure(entry_point, module_name, exc)) from exc
    target: Any = module
    for part in attr.split("."):
        if not hasattr(target, part):
            raise EnvNotFound(f"entry point {entry_point!r}: module {module_name!r} has no attribute {attr!r}")
        target = getattr(target, part)
    if not callable(target):
        raise EnvNotFound(f"entry point {entry_point!r} is not callable")
    return target


def prepare_vizdoom() -> None:
    """ViZDoom creates ``./_vizdoom`` when a game starts and segfaults when another process creates
    it at the same moment, which env servers sharing a working directory do: make it beforehand."""
    try:
        os.makedirs("_vizdoom", exist_ok=True)
    except OSError:
        pass  # a read-only directory: ViZDoom reports what it needs itself


def _import_plugin(env_id: str) -> None:
    for prefix, module in PLUGIN_MODULES:
        if env_id.startswith(prefix):
            try:
                importlib.import_module(module)
            except ImportError:
                pass  # the registry lookup below reports the missing id with the hint
            if prefix == "Vizdoom":
                prepare_vizdoom()
            return


def make_env(env_id: str, kwargs: dict) -> Any:
    """Create one env from a registered id or a ``"package.module:callable"`` entry point."""
    if ":" in env_id:
        return load_entry_point(env_id)(**kwargs)
    _import_plugin(env_id)
    try:
        import gymnasium
    except ImportError:
        gymnasium = None
    if gymnasium is not None:
        try:
            return gymnasium.make(env_id, **kwargs)
        except (
            gymnasium.error.NameNotFound,
            gymnasium.error.NamespaceNotFound,
            gymnasium.error.VersionNotFound,
            gymnasium.error.UnregisteredEnv,
        ) as exc:
            gym_error: Exception = exc
    else:
        gym_error = ImportError("gymnasium is not installed")
    try:
        import gym  # legacy runtimes
    except ImportError:
        raise EnvNotFound(f"unknown env id {env_id!r}: {gym_error}; {REGISTERED_ADVICE}") from None
    try:
        return gym.make(env_id, **kwargs)
    except gym.error.Error as exc:
        raise EnvNotFound(f"unknown env id {env_id!r}: {gym_error}; legacy gym: {exc}; {REGISTERED_ADVICE}") from exc


def _accepts_seed(reset: Callable) -> bool:
    try:
        params = inspect.signature(reset).parameters
    except (TypeError, ValueError):
        return True
    return "seed" in params or any(p.kind is p.VAR_KEYWORD for p in params.values())


def is_legacy(env: Any) -> bool:
    """Pre-0.26 gym envs: reset without ``seed``, a ``seed()`` method and 4-tuple steps."""
    if type(env).__module__.startswith("gymnasium"):
        return False
    try:
        import gymnasium

        if isinstance(env, gymnasium.Env):
            return False
    except ImportError:
        pass
    return not _accepts_seed(env.reset)


class LegacyEnv:
    """Presents a pre-0.26 gym env with the gymnasium API the server speaks.

    ``done`` splits into terminated/truncated using ``info["TimeLimit.truncated"]`` as old gym's
    TimeLimit wrapper set it; ``reset(seed=...)`` calls ``env.seed(seed)`` first.
    """

    def __init__(self, env: Any) -> None:
        self.env = env
        self.observation_space = env.observation_space
        self.action_space = env.action_space
        self.metadata = dict(getattr(env, "metadata", {}) or {})
        self.render_mode = getattr(env, "render_mode", None)

    def reset(self, seed: Any = None, options: Any = None) -> tuple:
        if seed is not None and hasattr(self.env, "seed"):
            self.env.seed(seed)
        result = self.env.reset()
        return result, {}

    def step(self, action: Any) -> tuple:
        result = self.env.step(action)
        if len(result) == 5:
            return tuple(result)
        obs, reward, done, info = result
        truncated = bool(info.get("TimeLimit.truncated", False)) if isinstance(info, dict) else False
        return obs, reward, bool(done) and not truncated, truncated, info

    def render(self) -> Any:
        return self.env.render(mode="rgb_array") if self.render_mode is None else self.env.render()

    def close(self) -> None:
        self.env.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.env, name)


def get_attr(env: Any, name: str) -> Any:
    """Attribute lookup through wrappers, as gymnasium's ``get_wrapper_attr`` does."""
    if hasattr(env, "get_wrapper_attr"):
        return env.get_wrapper_attr(name)
    return getattr(env, name)


def set_attr(env: Any, name: str, value: Any) -> None:
    if hasattr(env, "set_wrapper_attr"):
        env.set_wrapper_attr(name, value)
    else:
        setattr(env, name, value)
