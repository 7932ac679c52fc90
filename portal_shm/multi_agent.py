"""``make_vec_ma``: PettingZoo envs in isolated runtimes, as per-agent batches (``MultiAgentPortal``).

Beside ``api.make_vec``, which it composes: the envs are ``make_vec`` envs whose id is one of the
env side's adapters (``portal_shm.server.multi_agent``), so every backend and portal kind serves them.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence, Union

from .agent.multi_agent.flat import FlatAgents
from .agent.multi_agent.portal import AgentBatch, AgentGroup, MultiAgentPortal, MultiAgentResult
from .api import make_vec
from .runtimes.backend import Backend

__all__ = ["ADAPTERS", "AgentBatch", "AgentGroup", "FlatAgents", "MultiAgentPortal", "MultiAgentResult", "make_vec_ma"]

#: The env side's adapters, by the PettingZoo API they serve.
ADAPTERS = {
    "parallel": "portal_shm.server.multi_agent:parallel",
    "aec": "portal_shm.server.multi_agent:aec",
    "two_player": "portal_shm.server.multi_agent:two_player",
}


def make_vec_ma(
    env: str,
    num_envs: int = 1,
    *,
    api: str = "parallel",
    backend: Union[str, Backend] = "process",
    groups: Optional[dict[str, Sequence[str]]] = None,
    dead_obs: str = "zeros",
    info_action_mask: bool = False,
    agents: Optional[Sequence[str]] = None,
    vector_kwargs: Optional[dict[str, Any]] = None,
    env_kwargs: Optional[dict[str, Any]] = None,
    **make_vec_kwargs: Any,
) -> MultiAgentPortal:
    """``num_envs`` copies of the multi-agent env ``env``, each in an isolated runtime, as one
    ``MultiAgentPortal`` (``(num_envs * k, ...)`` rows per group of ``k`` agents).

    Args:
        env: the PettingZoo env's entry point, ``"package.module:callable"``
            (``"mpe2.simple_spread_v3:parallel_env"``, ``"pettingzoo.classic.tictactoe_v3:env"``);
            for ``api="two_player"``, a gymnasium id or entry point of a 2-player env.
        api: ``"parallel"`` (a ParallelEnv), ``"aec"`` (a turn-based AECEnv: one decision point
            per env and call) or ``"two_player"`` (a zero-sum gymnasium env with both players'
            actions and the first player's reward: rewards ``(r, -r)``).
        groups: ``{name: [agent, ...]}`` naming every possible agent once; default: agents grouped
            by identical (observation space, action space). Agents with different spaces cannot
            share a group.
        dead_obs: what an agent's rows hold after the call it left on: ``"zeros"`` (the default
            of every view, ``FlatAgents`` and ``portal_shm.sb3`` included) or ``"last"`` (its last
            observation, kept). On the call it leaves, its rows hold its real last observation
            either way (``final_obs`` of the flat view is that one).
        info_action_mask: take action masks from ``infos[agent]["action_mask"]`` (Discrete actions;
            masks in PettingZoo's observation dict are found without it).
        agents: ``api="two_player"``: the two players' names for a Tuple action space (default
            ``player_0``, ``player_1``); a Dict action space's keys name them.
        vector_kwargs: the portal's (``batch_size``, ``autoreset_mode``, ``envs_per_server`` ...), as
            ``make_vec``'s.
        env_kwargs: the env's own constructor arguments (``{"max_cycles": 25}``), any names
            (``env_id``, ``num_envs``, ``groups`` ... reach the env unchanged).
        make_vec_kwargs: options of the backend (``python=``, ``image=``, ``hosts=`` ...), as ``make_vec``'s.
    """
    if api not in ADAPTERS:
        raise ValueError(f"api must be one of {sorted(ADAPTERS)} (the PettingZoo API of {env!r}), got {api!r}")
    adapter_kwargs: dict[str, Any] = {
        "env_id": env,
        "groups": None if groups is None else {k: list(v) for k, v in groups.items()},
    }
    adapter_kwargs["dead_obs"] = dead_obs
    if api == "two_player":
        if info_action_mask:
            raise ValueError("info_action_mask applies to PettingZoo envs, not to api='two_player'")
        adapter_kwargs["agents"] = None if agents is None else list(agents)
    else:
        if agents is not None:
            raise ValueError(f"agents= names the players of api='two_player'; a PettingZoo env ({api}) names its own")
        adapter_kwargs["info_action_mask"] = info_action_mask
    adapter_kwargs["env_kwargs"] = dict(env_kwargs or {})  # nested: any name reaches the env unchanged
    portal = make_vec(
        ADAPTERS[api],
        num_envs,
        backend=backend,
        vector_kwargs=vector_kwargs,
        env_kwargs=adapter_kwargs,
        **make_vec_kwargs,
    )
    return MultiAgentPortal(portal)
