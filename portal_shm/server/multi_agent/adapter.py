"""What the parallel and the turn-based adapters share: loading the PettingZoo env, its groups and
fixed spaces, and passing render, close and attribute reads through to it."""

from __future__ import annotations

from typing import Any, Callable, Optional, Union

import gymnasium as gym
from gymnasium.vector.utils import batch_space

from ..envs import EnvNotFound, load_entry_point
from .groups import AgentSlots, make_groups

EnvSource = Union[str, Callable[..., Any]]


def load(env_id: EnvSource, kwargs: dict, api: str) -> Any:
    """The PettingZoo env ``env_id`` names, made with ``kwargs``: an id of PettingZoo's registry
    (``"classic/tictactoe-v3"``, PettingZoo 1.27+: ``pettingzoo.make(api, ...)``), an entry point
    ``"package.module:callable"`` (``"mpe2.simple_spread_v3:parallel_env"``) or a callable."""
    if callable(env_id):
        return env_id(**kwargs)
    if not isinstance(env_id, str):
        raise TypeError(
            f"env_id must be a PettingZoo id or an entry point 'package.module:callable', got {env_id!r:.80}"
        )
    if ":" in env_id:
        return load_entry_point(env_id)(**kwargs)
    try:
        from pettingzoo import make
    except ImportError as exc:
        raise EnvNotFound(
            f"env id {env_id!r} is for PettingZoo's registry (pettingzoo>=1.27), which this runtime lacks ({exc}): "
            "install it there, or name the env by its entry point 'package.module:callable'"
        ) from exc
    try:
        return make(api, env_id, **kwargs)
    except Exception as exc:
        if type(exc).__name__ not in ("NameNotFound", "FailedToImport"):
            raise
        raise EnvNotFound(
            f"PettingZoo env {env_id!r} ({api}): {exc}; install the package that holds it in that runtime, "
            "or pass the env's entry point 'package.module:callable'"
        ) from exc


class MultiAgentAdapter(gym.Env):
    """One PettingZoo env as one gymnasium env with fixed spaces (see the package docstring).

    Attributes the adapter lacks are read from the PettingZoo env (``envs.get_attr`` reaches it);
    ``multi_agent_layout`` is what ``MultiAgentPortal`` reads to name the slots.
    """

    kind = ""

    def __init__(
        self,
        env: Any,
        groups: Optional[dict] = None,
        dead_obs: str = "zeros",
        info_action_mask: bool = False,
    ) -> None:
        self.env = env
        possible = list(env.possible_agents)
        self.groups = make_groups(possible, env.observation_space, env.action_space, groups, info_action_mask)
        self.slots = AgentSlots(self.groups, dead_obs)
        self.observation_space = self.slots.space
        self.action_space = gym.spaces.Dict({g.name: batch_space(g.action_space, len(g.agents)) for g in self.groups})
        self.metadata = dict(getattr(env, "metadata", None) or {})
        self.render_mode = getattr(env, "render_mode", None)
        self.multi_agent_layout = {
            "kind": self.kind,
            "dead_obs": dead_obs,
            "groups": [group.layout() for group in self.groups],
        }

    def render(self) -> Any:
        return self.env.render()

    def close(self) -> None:
        self.env.close()

    def __getattr__(self, name: str) -> Any:
        if name == "env" or name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.env, name)
