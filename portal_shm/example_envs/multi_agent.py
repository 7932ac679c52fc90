"""Multi-agent envs without PettingZoo: a parallel env whose agents leave and come back, and a
two-player env in one Dict action (``portal_shm.server.multi_agent``'s adapters serve them)."""

from __future__ import annotations

from typing import Any, Optional

import gymnasium as gym
import numpy as np
from gymnasium import spaces


class LeavingAgentsEnv:
    """A PettingZoo ParallelEnv by duck typing (no PettingZoo needed), of ``num_agents`` agents ``a_0, a_1, ...``: ``leaver`` terminates on step
    ``leave_at`` and is back in ``agents`` from step ``return_at``; every agent is truncated at
    ``episode_length``.

    Observations are ``[t, agent index, noise]`` (noise from the reset seed), rewards the action
    plus the agent's index. ``seen`` records the actions of every step; a step with an action for
    an agent not in ``agents`` raises, so an env that runs through proves it never got one. With
    ``info_masks`` each agent's info holds an ``action_mask`` that forbids action ``t % 3``.
    """

    metadata = {"render_modes": []}

    def __init__(
        self,
        num_agents: int = 3,
        leaver: int = 1,
        leave_at: int = 10,
        return_at: int = 20,
        episode_length: int = 30,
        info_masks: bool = False,
    ) -> None:
        self.info_masks = info_masks
        self.possible_agents = [f"a_{i}" for i in range(num_agents)]
        self.leaver = self.possible_agents[leaver]
        self.leave_at, self.return_at, self.episode_length = leave_at, return_at, episode_length
        self.agents: list = []
        self.seen: list = []
        self.t = 0
        self.rng = np.random.default_rng()

    def observation_space(self, agent: str) -> spaces.Box:
        return spaces.Box(-np.inf, np.inf, (3,), np.float32)

    def action_space(self, agent: str) -> spaces.Discrete:
        return spaces.Discrete(3)

    def _obs(self, agent: str) -> np.ndarray:
        index = self.possible_agents.index(agent)
        return np.array([self.t, index, self.rng.normal()], np.float32)

    def reset(self, seed: Optional[int] = None, options: Optional[dict] = None) -> tuple:
        if seed is not None:
            self.rng = np.random.default_rng(seed)
        self.t = 0
        self.agents = list(self.possible_agents)
        return {a: self._obs(a) for a in self.agents}, {a: self._info() for a in self.agents}

    def _info(self) -> dict:
        if not self.info_masks:
            return {}
        mask = np.ones(3, np.int8)
        mask[self.t % 3] = 0
        return {"action_mask": mask, "t": self.t}

    def step(self, actions: dict) -> tuple:
        if set(actions) != set(self.agents):
            raise ValueError(f"step {self.t + 1}: actions for {sorted(actions)}, agents are {self.agents}")
        self.seen.append({agent: int(action) for agent, action in actions.items()})
        self.t += 1
        rewards = {a: float(actions[a]) + self.possible_agents.index(a) for a in self.agents}
        terminated = {a: self.t == self.leave_at and a == self.leaver for a in self.agents}
        truncated = {a: self.t >= self.episode_length for a in self.agents}
        obs = {a: self._obs(a) for a in self.agents}
        infos: dict = {a: self._info() for a in self.agents}
        self.agents = [a for a in self.agents if not (terminated[a] or truncated[a])]
        if self.t == self.return_at and self.t < self.episode_length:
            self.agents = [a for a in self.possible_agents if a in self.agents or a == self.leaver]
            obs[self.leaver] = self._obs(self.leaver)
            infos[self.leaver] = {"back": True, **self._info()}
        return obs, rewards, terminated, truncated, infos

    def close(self) -> None:
        pass


def named_agents_env(env_id: str = "", num_envs: int = 1, groups: Any = None, num_agents: int = 3) -> LeavingAgentsEnv:
    """A ``LeavingAgentsEnv`` made by a function whose arguments are named like ``make_vec_ma``'s and
    its adapters' own (``env_id``, ``num_envs``, ``groups``); ``made_with`` holds what it got."""
    env = LeavingAgentsEnv(num_agents=num_agents)
    env.made_with = {"env_id": env_id, "num_envs": num_envs, "groups": groups, "num_agents": num_agents}
    return env


class MatchingPenniesEnv(gym.Env):
    """Both players' actions in one Dict, one reward (the first player's, zero-sum): the DIAMBRA 2P
    shape, for ``portal_shm.server.multi_agent:two_player``.

    Each round the first player wins 1 when the coins match (plus a seeded bonus, so rewards carry
    the seed), else loses it; the episode is ``rounds`` rounds."""

    def __init__(self, rounds: int = 5) -> None:
        self.observation_space = spaces.Box(-np.inf, np.inf, (2,), np.float32)
        self.action_space = spaces.Dict({"agent_0": spaces.Discrete(2), "agent_1": spaces.Discrete(2)})
        self.rounds, self.t = int(rounds), 0

    def _obs(self) -> np.ndarray:
        return np.array([self.t, self.np_random.normal()], np.float32)

    def reset(self, *, seed: Optional[int] = None, options: Optional[dict] = None) -> tuple:
        super().reset(seed=seed)
        self.t = 0
        return self._obs(), {"round": 0}

    def step(self, action: Any) -> tuple:
        self.t += 1
        same = int(action["agent_0"]) == int(action["agent_1"])
        reward = (1.0 if same else -1.0) + float(self.np_random.uniform(0, 0.5))
        return self._obs(), reward, self.t >= self.rounds, False, {"round": self.t}
