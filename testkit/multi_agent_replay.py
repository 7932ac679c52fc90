"""Multi-agent envs stepped in-process, the way their own APIs are looped, for the equality tests:
what ``make_vec_ma``'s rows must hold, built from PettingZoo's own loops without the adapters."""

from __future__ import annotations

import numpy as np


class ParallelReplay:
    """One ParallelEnv stepped as a NextStep or SameStep autoreset vector env steps it, giving each
    call's per-agent rows (dead-agent contract, ``dead_obs="zeros"``: an agent's real last observation
    on the call it ends, zeros after) as ``{agent: row}``."""

    def __init__(self, env, seed: int, mode: str = "NextStep") -> None:
        self.env, self.mode, self.seed = env, mode, seed
        self.done = False

    def _zeros(self, agent):
        space = self.env.observation_space(agent)
        return np.zeros(space.shape, space.dtype)

    def _fresh(self, obs):
        return {
            a: {
                "obs": obs[a] if a in obs else self._zeros(a),
                "reward": 0.0,
                "terminated": False,
                "truncated": False,
                "mask": a in self.env.agents,
            }
            for a in self.env.possible_agents
        }

    def reset(self):
        obs, _ = self.env.reset(seed=self.seed)
        self.done = False
        return self._fresh(obs), False, False

    def step(self, actions):
        """``actions``: every possible agent's (the masked ones are dropped, as the contract says)."""
        if self.done and self.mode == "NextStep":
            obs, _ = self.env.reset()
            self.done = False
            return self._fresh(obs), False, False
        live = list(self.env.agents)
        obs, rewards, terms, truncs, _ = self.env.step({a: actions[a] for a in live})
        rows = {}
        for a in self.env.possible_agents:
            alive = a in self.env.agents
            rows[a] = {
                "obs": obs[a] if a in obs and (alive or a in live) else self._zeros(a),
                "reward": float(rewards[a]) if a in live else 0.0,
                "terminated": bool(terms.get(a, False)) if a in live and not alive else False,
                "truncated": bool(truncs.get(a, False)) if a in live and not alive else False,
                "mask": alive,
            }
        self.done = not self.env.agents
        terminated = self.done and not all(truncs.get(a) and not terms.get(a) for a in live if a not in self.env.agents)
        truncated = self.done and not terminated
        if self.done and self.mode == "SameStep":
            obs, _ = self.env.reset()
            self.done = False
            fresh = self._fresh(obs)
            for a, row in rows.items():
                row.update(obs=fresh[a]["obs"], mask=fresh[a]["mask"])
        return rows, terminated, truncated


def aec_games(env, seed: int, games: int, choose) -> list:
    """PettingZoo's own AEC loop over ``games`` games (the first reset seeded, the next ones not,
    as autoreset does): per game its decisions ``(agent, observation, action_mask, reward)`` in
    order and its agents' final ``(reward, terminated, truncated)``. ``choose(mask)`` acts."""
    out = []
    env.reset(seed=seed)
    for game in range(games):
        if game:
            env.reset()
        decisions, finals = [], {}
        for agent in env.agent_iter():
            obs, reward, terminated, truncated, _ = env.last()
            if terminated or truncated:
                finals[agent] = (float(reward), bool(terminated), bool(truncated))
                env.step(None)
                continue
            decisions.append((agent, obs["observation"].copy(), obs["action_mask"].copy(), float(reward)))
            env.step(choose(agent, obs["action_mask"]))
        out.append((decisions, finals))
    return out


def actions_of(envs, actions: dict, env: int) -> dict:
    """Env ``env``'s actions, by agent, out of a ``MultiAgentPortal`` call's per-group rows."""
    return {
        agent: actions[name][row] for name in actions for row, (e, agent) in enumerate(envs.agent_ids[name]) if e == env
    }
