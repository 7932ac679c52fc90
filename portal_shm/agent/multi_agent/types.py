"""The values a multi-agent portal hands out, and what of it ``FlatAgents`` needs: one module under
both, so that the portal and its flat view do not import each other."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple, Optional, Protocol

import numpy as np
from gymnasium.spaces import Space


@dataclass(frozen=True)
class AgentGroup:
    """Agents that share one observation and one action space (one agent's, as the env declares
    them; ``obs`` rows are ``observation_space`` values, without PettingZoo's ``action_mask``)."""

    name: str
    agents: tuple[str, ...]
    observation_space: Space[Any]
    action_space: Space[Any]
    has_action_mask: bool

    @property
    def size(self) -> int:
        """Agents per env: each env has this many rows of the group."""
        return len(self.agents)


class AgentBatch(NamedTuple):
    """One group's rows of one call: row ``e * k + j`` is agent ``j`` of the ``e``-th env of the
    call (all envs in lockstep, ``infos["env_id"]``'s with async batches).

    ``mask``: the agent acts on the next step (masked rows' actions are never passed to the env).
    ``reward``, ``terminated``, ``truncated``: per agent, for the action its row took last call.
    ``returned``: the agent came back on this call after it had left (PettingZoo#661).
    ``action_mask``: the env's own (None for a group without one).

    With ``autoreset_mode="SameStep"`` the rows of an env whose episode ended on the call hold
    that episode's last ``reward``/``terminated``/``truncated`` beside the new episode's first
    ``obs``/``mask``/``action_mask`` (the ended episode's last observation is in
    ``infos["final_obs"]``), as gymnasium's vector envs do; those three arrays are then copies.
    """

    obs: Any
    reward: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    mask: np.ndarray
    action_mask: Optional[np.ndarray]
    returned: np.ndarray


class MultiAgentResult(NamedTuple):
    """What ``reset``, ``step`` and ``recv`` return: per-group rows, and per env of the call whether
    its episode ended (every agent done) and the portal's infos (``env_id``, ``agents`` ...)."""

    groups: dict[str, AgentBatch]
    terminated: np.ndarray
    truncated: np.ndarray
    infos: dict[str, Any]


class MultiAgentEnvs(Protocol):
    """What ``FlatAgents`` uses of a ``MultiAgentPortal``."""

    @property
    def groups(self) -> dict[str, AgentGroup]: ...

    @property
    def num_envs(self) -> int: ...

    @property
    def batch_size(self) -> Optional[int]: ...

    @property
    def autoreset_mode(self) -> Any: ...

    @property
    def portal(self) -> Any: ...

    def reset(self, *, seed: Any = None, options: Optional[dict[str, Any]] = None) -> MultiAgentResult: ...

    def step(self, actions: Any) -> MultiAgentResult: ...

    def close(self) -> None: ...
