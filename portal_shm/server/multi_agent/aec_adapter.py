"""A PettingZoo ``AECEnv`` (turn-based) as one gymnasium env: each call ends at a decision point."""

from __future__ import annotations

from typing import Any, Optional

from .adapter import MultiAgentAdapter
from .groups import episode_flags, take


class AECAdapter(MultiAgentAdapter):
    """Duck-types an AECEnv: ``possible_agents``, ``agents``, ``agent_selection``, ``last()``,
    ``step(action)``, ``reset(seed, options)``, ``observation_space(agent)``, ``action_space(agent)``.

    Each ``reset``/``step`` runs the env to its next decision point: agents whose episode ended are
    stepped with ``None`` (as PettingZoo's own loop does) and reported with the reward ``last()``
    gave them, until an agent that acts is selected; only its slot has mask 1, with the reward
    accumulated since its last decision (``last()``, PettingZoo's ``_cumulative_rewards``).
    """

    kind = "aec"

    def __init__(
        self, env: Any, groups: Optional[dict] = None, dead_obs: str = "zeros", info_action_mask: bool = False
    ) -> None:
        super().__init__(env, groups, dead_obs, info_action_mask)
        self.gone: set = set()  # agents whose episode ended in this game (one selected again is back)

    def reset(self, *, seed: Optional[int] = None, options: Optional[dict] = None) -> tuple:
        self.env.reset(seed=seed, options=options)
        self.slots.begin(fresh=True)
        self.gone = set()
        self._advance({})
        return self.slots.finish()

    def step(self, action: Any) -> tuple:
        agent = self.env.agent_selection
        group, i = self.slots.where[agent]
        self.slots.begin()
        self.env.step(take(action[group.name], i))  # the one unmasked slot's action; the others are never read
        ended: dict = {}
        self._advance(ended)
        observation, info = self.slots.finish()
        terminated, truncated = episode_flags(ended) if not self.env.agents else (False, False)
        return observation, self.slots.total_reward(), terminated, truncated, info

    def _advance(self, ended: dict) -> None:
        """Step past agents whose episode ended until an acting agent is selected or none is left."""
        env, slots = self.env, self.slots
        while env.agents:
            agent = env.agent_selection
            obs, reward, terminated, truncated, info = env.last()
            slots.reward(agent, reward)
            slots.info(agent, info)
            if terminated or truncated:
                ended[agent] = (bool(terminated), bool(truncated))
                slots.end(agent, bool(terminated), bool(truncated), final_obs=obs, has_obs=True, info=info)
                self.gone.add(agent)
                env.step(None)
                continue
            if agent in self.gone:
                self.gone.discard(agent)
                slots.came_back(agent)
            slots.set_mask(agent)
            slots.observe(agent, obs, info)
            return
