"""MultiAgentPortal: per-agent batches of a portal whose envs are PettingZoo envs.

The env side (``portal_shm.server.multi_agent``) serves each PettingZoo env as one gymnasium env
whose observation holds, per group of agents with equal spaces, ``(k, ...)`` stacked fields
(``obs``, ``reward``, ``terminated``, ``truncated``, ``mask``, ``action_mask``). A portal batches
them to ``(num_envs, k, ...)``; this class reshapes each field to ``(num_envs * k, ...)``, the
layout of PufferLib and SuperSuit, in which row ``e * k + j`` is agent ``j`` of env ``e``. A
reshape of a ring view is a view, so the batches are the ring's memory as the portal's are, and
stay valid as long (``ring_depth - 1`` further calls; see ``portal_shm.agent.vector``).

It only composes a ``PortalVectorEnv``, so it works on every backend and with async batches; the
dead-agent contract (what masked rows hold) is the env side's, in its package docstring.
"""

from __future__ import annotations

from typing import Any, Mapping, Optional, Sequence

import numpy as np
from gymnasium.spaces import Space
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import batch_space

from ..contract.base import PortalVectorEnv
from ..contract.checks import check_env_ids
from ..contract.spaces import schema_to_space
from .flat import FlatAgents, OthersPolicy
from .types import AgentBatch, AgentGroup, MultiAgentResult

FIELDS = ("obs", "reward", "terminated", "truncated", "mask")


def _rows(value: Any, envs: int, k: int) -> Any:
    """``(envs, k, ...)`` leaves as ``(envs * k, ...)``: a view wherever numpy can make one."""
    if isinstance(value, dict):
        return {key: _rows(sub, envs, k) for key, sub in value.items()}
    if isinstance(value, tuple):
        return tuple(_rows(sub, envs, k) for sub in value)
    array = np.asarray(value)
    return array.reshape((envs * k,) + array.shape[2:])


def _stacked(value: Any, envs: int, k: int, where: str) -> Any:
    """``(envs * k, ...)`` action leaves as the portal's ``(envs, k, ...)``."""
    if isinstance(value, dict):
        return {key: _stacked(sub, envs, k, f"{where}[{key!r}]") for key, sub in value.items()}
    if isinstance(value, tuple):
        return tuple(_stacked(sub, envs, k, f"{where}[{i}]") for i, sub in enumerate(value))
    array = np.asarray(value)
    if array.ndim == 0 or array.shape[0] != envs * k:
        raise ValueError(
            f"{where} has shape {array.shape}: give one row per agent slot, {envs} envs x {k} agents = "
            f"{envs * k} rows (any valid value in masked rows: they are never passed to the env)"
        )
    return array.reshape((envs, k) + array.shape[1:])


def _read_layout(portal: PortalVectorEnv) -> dict[str, Any]:
    try:
        layout = portal.get_attr_envs([0], "multi_agent_layout")[0]
    except AttributeError:
        raise ValueError(
            "MultiAgentPortal needs envs served by portal_shm.server.multi_agent (its parallel, aec or "
            "two_player entry points): make them with portal_shm.make_vec_ma"
        ) from None
    if not isinstance(layout, dict) or not isinstance(layout.get("groups"), list):
        raise ValueError(f"env 0's multi_agent_layout is not a layout: {layout!r:.200}")
    return layout


class MultiAgentPortal:
    """Per-agent views of a portal of multi-agent envs (see the module docstring).

    ``groups`` says which agents each group's rows hold, ``agent_ids`` which (env index, agent) each
    row of a full (lockstep) call is, ``action_spaces`` what one call's actions look like per group.
    ``portal`` is the underlying ``PortalVectorEnv`` (``call``, ``get_attr``, ``stats`` ...).

    Args:
        portal: a portal whose envs are ``portal_shm.server.multi_agent`` adapters (from
            ``portal_shm.make_vec_ma``); this object owns it and closes it.
    """

    def __init__(self, portal: PortalVectorEnv) -> None:
        self.portal = portal
        try:
            layout = _read_layout(portal)
            self.kind: str = str(layout.get("kind", ""))
            self.dead_obs: str = str(layout.get("dead_obs", ""))
            self.groups: dict[str, AgentGroup] = {}
            for entry in layout["groups"]:
                group = AgentGroup(
                    str(entry["name"]),
                    tuple(str(a) for a in entry["agents"]),
                    schema_to_space(entry["observation_space"]),
                    schema_to_space(entry["action_space"]),
                    bool(entry["action_mask"]),
                )
                self.groups[group.name] = group
            served = getattr(portal.single_observation_space, "spaces", {})
            if set(served) != set(self.groups):
                raise ValueError(
                    f"the envs' observation space has groups {sorted(served)}, the layout {sorted(self.groups)}"
                )
        except BaseException:
            portal.close()
            raise
        self.num_envs: int = portal.num_envs
        self.batch_size: int = int(getattr(portal, "batch_size", None) or self.num_envs)
        self.autoreset_mode = AutoresetMode(portal.metadata.get("autoreset_mode", AutoresetMode.NEXT_STEP))
        self.agent_ids: dict[str, list[tuple[int, str]]] = {
            name: self.batch_agent_ids(name, range(self.num_envs)) for name in self.groups
        }
        self.action_spaces: dict[str, Space[Any]] = {
            name: batch_space(group.action_space, self.batch_size * group.size) for name, group in self.groups.items()
        }
        self._last_envs = self.batch_size

    def batch_agent_ids(self, group: str, env_ids: Sequence[int] | np.ndarray) -> list[tuple[int, str]]:
        """(env index, agent) of each row of ``group`` in a call of the envs ``env_ids`` (a batch's
        ``infos["env_id"]``)."""
        agents = self.groups[group].agents
        return [(int(e), agent) for e in env_ids for agent in agents]

    def flat(self, group: Optional[str] = None, others: Optional[OthersPolicy] = None) -> FlatAgents:
        """``group``'s agents as the envs of a gymnasium ``VectorEnv`` (``num_envs * k`` of them), for
        parameter-shared training (``portal_shm.agent.multi_agent.flat``); the view owns these envs."""
        return FlatAgents(self, group, others)

    # -- calls ----------------------------------------------------------------------------------
    def reset(
        self, *, seed: int | list[int | None] | None = None, options: dict[str, Any] | None = None
    ) -> MultiAgentResult:
        """Reset every env (``seed`` as gymnasium's vector envs take it); with async batches, the
        first batch, as ``PortalVectorEnv.reset``."""
        obs, infos = self.portal.reset(seed=seed, options=options)
        envs = self._count(obs)
        flags = np.zeros(envs, np.bool_)
        return self._result(obs, flags, flags, infos)

    def step(self, actions: Mapping[str, Any]) -> MultiAgentResult:
        """Step every env (lockstep; with async batches: ``send`` the last batch, ``recv`` the next)
        with one action per row of each group: ``actions[group]`` of shape ``(envs * k, ...)``."""
        obs, _, terminated, truncated, infos = self.portal.step(self._actions(actions, self._last_envs))
        return self._result(obs, terminated, truncated, infos)

    def send(self, actions: Mapping[str, Any], env_ids: Sequence[int] | np.ndarray | None = None) -> None:
        """Step the envs ``env_ids`` (default: the last batch's) and return at once (async batches):
        ``actions[group]`` holds ``len(env_ids) * k`` rows, in the order of ``env_ids``."""
        count = self._last_envs if env_ids is None else len(check_env_ids(env_ids, self.num_envs))
        self.portal.send(self._actions(actions, count), env_ids)

    def recv(self, timeout: float | None = None) -> MultiAgentResult:
        """The next ``batch_size`` envs to finish, as rows of their agents; ``infos["env_id"]``
        says which envs (``batch_agent_ids`` names the rows)."""
        obs, _, terminated, truncated, infos = self.portal.recv(timeout)
        return self._result(obs, terminated, truncated, infos)

    def close(self) -> None:
        self.portal.close()

    def __enter__(self) -> MultiAgentPortal:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        groups = ", ".join(f"{name}: {group.size}" for name, group in self.groups.items())
        return f"MultiAgentPortal({self.kind}, {self.num_envs} envs, agents per env {{{groups}}})"

    # -- views ----------------------------------------------------------------------------------
    def _count(self, obs: Any) -> int:
        first = next(iter(self.groups))
        return int(np.asarray(obs[first]["mask"]).shape[0])

    def _actions(self, actions: Mapping[str, Any], envs: int) -> dict[str, Any]:
        if not isinstance(actions, Mapping) or set(actions) != set(self.groups):
            given = sorted(actions) if isinstance(actions, Mapping) else type(actions).__name__
            raise ValueError(f"actions must be a dict with one entry per group {sorted(self.groups)}, got {given}")
        return {
            name: _stacked(actions[name], envs, group.size, f"actions[{name!r}]") for name, group in self.groups.items()
        }

    def _result(
        self, obs: Any, terminated: np.ndarray, truncated: np.ndarray, infos: dict[str, Any]
    ) -> MultiAgentResult:
        envs = self._count(obs)
        self._last_envs = envs
        finals = self._finals(infos, envs)
        returned = infos.get("returned", {})
        groups = {}
        for name, group in self.groups.items():
            k, fields = group.size, obs[name]
            reward, term, trunc = (_rows(fields[key], envs, k) for key in ("reward", "terminated", "truncated"))
            if finals:  # SameStep: an ended env's row holds the new episode; its last step is in final_obs
                reward, term, trunc = reward.copy(), term.copy(), trunc.copy()
                for e, final in finals:
                    rows = slice(e * k, (e + 1) * k)
                    reward[rows], term[rows], trunc[rows] = (
                        final[name]["reward"],
                        final[name]["terminated"],
                        final[name]["truncated"],
                    )
            back = np.zeros(envs * k, np.bool_)
            if name in returned:
                back[:] = (np.asarray(returned[name]) & np.asarray(returned["_" + name])[:, None]).reshape(-1)
            groups[name] = AgentBatch(
                _rows(fields["obs"], envs, k),
                reward,
                term,
                trunc,
                _rows(fields["mask"], envs, k),
                _rows(fields["action_mask"], envs, k) if group.has_action_mask else None,
                back,
            )
        return MultiAgentResult(groups, terminated, truncated, infos)

    def _finals(self, infos: dict[str, Any], envs: int) -> list[tuple[int, Any]]:
        """SameStep autoreset: the envs of the call whose episode ended, with their last step's observation."""
        if self.autoreset_mode is not AutoresetMode.SAME_STEP or "final_obs" not in infos:
            return []
        final, has = infos["final_obs"], infos["_final_obs"]
        return [(e, final[e]) for e in range(envs) if has[e]]
