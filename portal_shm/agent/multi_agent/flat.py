"""FlatAgents: one group's agents of a ``MultiAgentPortal`` as the envs of a gymnasium ``VectorEnv``.

Parameter sharing trains one policy on every agent of a group as if each were an env of its own:
SuperSuit's ``pettingzoo_env_to_vec_env_v1`` + ``concat_vec_envs_v1`` and PufferLib's emulation
do that, and so libraries written for single-agent vector envs (SB3, cleanrl's loops) train
multi-agent envs unchanged. Row ``e * k + j`` of this view is agent ``j`` of env ``e``, the layout
``MultiAgentPortal`` already returns, so a call is the portal's call plus reshapes: no copy.

Masked rows (agents that left, or are not to move in a turn-based env) stay rows, because a
vector env's size is fixed: they hold the dead-agent contract's values (reward 0, flags False,
zero or last observation), their actions are never passed to the env, and ``infos["agent_mask"]``
says which rows acted. A row's episode ends when its agent's does (PettingZoo's flags for it, True
exactly once), with the agent's real last observation, as SuperSuit's vector envs give it; the env
resets when its last agent has ended.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Optional, Sequence

import numpy as np
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from .types import MultiAgentEnvs, MultiAgentResult

OthersPolicy = Callable[[MultiAgentResult], Mapping[str, Any]]


class FlatAgents(VectorEnv):
    """``envs``' group ``group`` as a ``VectorEnv`` of ``envs.num_envs * k`` envs (see the module docstring).

    Args:
        envs: lockstep multi-agent envs (no ``batch_size``: a vector env steps all its envs); this
            view owns them and closes them.
        group: the group whose agents become the envs; may be left out when there is one group.
        others: the other groups' actions, asked for on every step with the last result
            (``{group: rows}``, as ``MultiAgentPortal.step`` takes them): e.g. a fixed opponent.
            Required when the envs have more than one group.

    Spaces are one agent's (``single_observation_space`` is the group's observation space).
    ``infos`` hold, per row: ``agent_mask`` (the agent acts on this row's next action),
    ``returned`` (it came back on this call), ``env_id`` (the env the row belongs to) and the
    group's ``action_mask`` where it has one. With ``autoreset_mode="SameStep"``, rows whose flags
    are set have ``final_obs``, the agent's real last observation whatever ``dead_obs`` says (the
    ended episode's, for an env that ended on the call; else the row's own, which holds it on the
    call the agent leaves), and ``final_info`` (``env_id``, ``agent_mask`` False). The portal's
    per-env infos (``infos["agents"]`` ...) are in ``last_result.infos``.
    """

    def __init__(self, envs: MultiAgentEnvs, group: Optional[str] = None, others: Optional[OthersPolicy] = None):
        if group is None:
            if len(envs.groups) != 1:
                raise ValueError(f"the envs have groups {sorted(envs.groups)}: name the one to flatten (group=...)")
            group = next(iter(envs.groups))
        if group not in envs.groups:
            raise ValueError(f"no group {group!r}: the envs have {sorted(envs.groups)}")
        if len(envs.groups) > 1 and others is None:
            rest = sorted(set(envs.groups) - {group})
            raise ValueError(f"the envs also have groups {rest}: pass others= to act for them (a fixed policy)")
        if envs.batch_size != envs.num_envs:
            raise ValueError(
                f"FlatAgents steps every env on each call; these envs run async batches of {envs.batch_size}: "
                "make them without batch_size"
            )
        self.envs, self.group, self.others = envs, envs.groups[group], others
        self.k = self.group.size
        self.num_envs = envs.num_envs * self.k
        self.single_observation_space = self.group.observation_space
        self.single_action_space = self.group.action_space
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        self.metadata = {"autoreset_mode": envs.autoreset_mode}
        self.render_mode = getattr(envs.portal, "render_mode", None)
        self.env_of_row = np.repeat(np.arange(envs.num_envs), self.k)
        self.last_result: Optional[MultiAgentResult] = None

    def reset(
        self, *, seed: int | list[int | None] | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        """Reset every env: ``seed`` an int or a list of one seed per env, or per row as SB3's
        ``seed()`` gives them (each env then gets its first row's seed)."""
        if isinstance(seed, (list, tuple)) and len(seed) == self.num_envs:
            seed = list(seed[:: self.k])
        if options and "reset_mask" in options:
            raise ValueError(
                "FlatAgents resets whole envs, not rows: make the envs with autoreset_mode='SameStep' "
                "or 'NextStep' (SB3VecEnv needs 'SameStep')"
            )
        result = self.envs.reset(seed=seed, options=options)
        self.last_result = result
        batch = result.groups[self.group.name]
        return batch.obs, self._infos(result, [])

    def step(self, actions: Any) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """One action per row (masked rows' are never passed to the env)."""
        assert self.last_result is not None, "call reset() before step()"
        chosen = {self.group.name: actions}
        if self.others is not None:
            chosen = {**self.others(self.last_result), **chosen}
        result = self.envs.step(chosen)
        self.last_result = result
        batch = result.groups[self.group.name]
        ended = np.flatnonzero(batch.terminated | batch.truncated)
        return batch.obs, batch.reward, batch.terminated, batch.truncated, self._infos(result, ended)

    def _infos(self, result: MultiAgentResult, ended: Sequence[int] | np.ndarray) -> dict[str, Any]:
        batch = result.groups[self.group.name]
        every = np.ones(self.num_envs, np.bool_)
        infos: dict[str, Any] = {"agent_mask": batch.mask, "_agent_mask": every}
        infos.update(returned=batch.returned, _returned=every, env_id=self.env_of_row, _env_id=every)
        if batch.action_mask is not None:
            infos.update(action_mask=batch.action_mask, _action_mask=every)
        if self.envs.autoreset_mode is AutoresetMode.SAME_STEP and len(ended):
            finals = result.infos.get("final_obs")
            has = result.infos.get("_final_obs", np.zeros(self.envs.num_envs, np.bool_))
            final_obs, rows = np.empty(self.num_envs, object), np.zeros(self.num_envs, np.bool_)
            for row in ended:
                e, j = divmod(int(row), self.k)
                env_obs = finals[e][self.group.name]["obs"] if finals is not None and has[e] else None
                final_obs[row] = _agent(env_obs, j) if env_obs is not None else _agent(batch.obs, int(row))
                rows[row] = True
            # the ended step's own infos, as gymnasium's SAME_STEP envs give them: the agent acts no more
            final_info = {"env_id": self.env_of_row, "_env_id": rows, "agent_mask": ~rows, "_agent_mask": rows}
            infos.update(final_obs=final_obs, _final_obs=rows, final_info=final_info, _final_info=rows)
        return infos

    # -- per-row calls reach the env the row's agent lives in (SB3VecEnv's get_attr, env_method) --
    def call_envs(self, rows: Sequence[int], name: str, *args: Any, **kwargs: Any) -> tuple[Any, ...]:
        """``name`` called in the env of each row, once per env (rows of one env share its result)."""
        env_ids = self._env_ids(rows)
        results = dict(zip(env_ids, self.envs.portal.call_envs(env_ids, name, *args, **kwargs)))
        return tuple(results[int(self.env_of_row[row])] for row in rows)

    def get_attr_envs(self, rows: Sequence[int], name: str) -> tuple[Any, ...]:
        """The attribute of the env of each row, read once per env."""
        env_ids = self._env_ids(rows)
        results = dict(zip(env_ids, self.envs.portal.get_attr_envs(env_ids, name)))
        return tuple(results[int(self.env_of_row[row])] for row in rows)

    def _env_ids(self, rows: Sequence[int]) -> list[int]:
        return sorted({int(self.env_of_row[row]) for row in rows})

    def render(self) -> Any:
        return self.envs.portal.render()

    def close_extras(self, **kwargs: Any) -> None:
        """Called once by ``VectorEnv.close``: the view owns the envs."""
        self.envs.close()

    def __repr__(self) -> str:
        return f"FlatAgents({self.group.name!r}: {self.envs.num_envs} envs x {self.k} agents)"


def _agent(value: Any, i: int) -> Any:
    """Row ``i`` of a batched observation (arrays, dicts and tuples of them), as a fresh array."""
    if isinstance(value, dict):
        return {key: _agent(sub, i) for key, sub in value.items()}
    if isinstance(value, tuple):
        return tuple(_agent(sub, i) for sub in value)
    return np.array(value[i])
