"""A PettingZoo ``ParallelEnv`` as one gymnasium env: every live agent acts on every step."""

from __future__ import annotations

from typing import Any, Optional

from .adapter import MultiAgentAdapter
from .groups import episode_flags, take


class ParallelAdapter(MultiAgentAdapter):
    """Duck-types a ParallelEnv: ``possible_agents``, ``agents``, ``observation_space(agent)``,
    ``action_space(agent)``, ``reset(seed, options) -> (obs, infos)``, ``step(actions) -> 5 dicts``."""

    kind = "parallel"

    def __init__(
        self, env: Any, groups: Optional[dict] = None, dead_obs: str = "zeros", info_action_mask: bool = False
    ) -> None:
        super().__init__(env, groups, dead_obs, info_action_mask)
        self.live: list = []  # the agents that act on the next step (``mask`` 1)

    def reset(self, *, seed: Optional[int] = None, options: Optional[dict] = None) -> tuple:
        obs, infos = self.env.reset(seed=seed, options=options)
        slots = self.slots
        slots.begin(fresh=True)
        self.live = list(self.env.agents)
        for agent in self.live:
            slots.set_mask(agent)
            slots.observe(agent, obs[agent], (infos or {}).get(agent))
            slots.info(agent, (infos or {}).get(agent))
        return slots.finish()

    def step(self, action: Any) -> tuple:
        where, slots = self.slots.where, self.slots
        actions = {}
        for agent in self.live:  # masked slots' actions never reach the env
            group, i = where[agent]
            actions[agent] = take(action[group.name], i)
        obs, rewards, terminations, truncations, infos = self.env.step(actions)
        now = list(self.env.agents)
        present = set(now)
        slots.begin()
        ended = {}
        for agent in self.live:
            slots.reward(agent, rewards.get(agent, 0.0))
            if agent not in present:
                flags = (bool(terminations.get(agent, False)), bool(truncations.get(agent, False)))
                ended[agent] = flags
                slots.end(agent, *flags, final_obs=obs.get(agent), has_obs=agent in obs, info=infos.get(agent))
                slots.info(agent, infos.get(agent))
        was_live = set(self.live)
        for agent in now:
            if agent not in was_live:
                slots.came_back(agent)
            slots.set_mask(agent)
            if agent in obs:
                slots.observe(agent, obs[agent], infos.get(agent))
            slots.info(agent, infos.get(agent))
        self.live = now
        observation, info = slots.finish()
        terminated, truncated = episode_flags(ended) if not now else (False, False)
        return observation, slots.total_reward(), terminated, truncated, info
