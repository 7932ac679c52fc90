"""Two-player zero-sum games that report one scalar reward (the DIAMBRA 2P shape) as a ParallelEnv.

Such an env is a plain gymnasium env whose action space holds both players' actions (a Dict of two,
or a Tuple of two) and whose reward is the first player's. For self-play each player needs its own
reward: the first gets ``r``, the second ``-r``. Both see the env's whole observation (a game that
shows each player its own view does so in its observation, e.g. DIAMBRA's ``P1``/``P2`` parts).
"""

from __future__ import annotations

from typing import Any, Optional, Sequence


class TwoPlayerEnv:
    """A ParallelEnv over a 2-player gymnasium env: ``possible_agents`` are the Dict action space's
    two keys (in its order) or ``agents`` (default ``("player_0", "player_1")``) for a Tuple."""

    def __init__(self, env: Any, agents: Optional[Sequence[str]] = None) -> None:
        space = env.action_space
        parts = getattr(space, "spaces", None)
        if isinstance(parts, dict):
            names = list(parts) if agents is None else [str(a) for a in agents]
            if len(parts) != 2 or (agents is not None and names != list(parts)):
                raise ValueError(
                    f"a 2-player env needs a Dict action space of exactly two players' actions, got {space}"
                    + ("" if agents is None else f" for agents={list(agents)} (they must be its keys, in order)")
                )
            self._joined = dict
        elif isinstance(parts, (tuple, list)) and len(parts) == 2:
            names = ["player_0", "player_1"] if agents is None else [str(a) for a in agents]
            self._joined = tuple
        else:
            raise ValueError(
                f"a 2-player env needs an action space of two players' actions (a Dict or Tuple of two), got {space}"
            )
        if len(names) != 2 or names[0] == names[1]:
            raise ValueError(f"agents must be two distinct names, got {names}")
        self.env = env
        self.possible_agents = names
        self.agents: list = []
        self._spaces = dict(zip(names, parts.values() if isinstance(parts, dict) else parts))
        self.metadata = dict(getattr(env, "metadata", None) or {})
        self.render_mode = getattr(env, "render_mode", None)

    def observation_space(self, agent: str) -> Any:
        return self.env.observation_space

    def action_space(self, agent: str) -> Any:
        return self._spaces[agent]

    def reset(self, seed: Optional[int] = None, options: Optional[dict] = None) -> tuple:
        obs, info = self.env.reset(seed=seed, options=options)
        self.agents = list(self.possible_agents)
        first, second = self.agents
        return {first: obs, second: obs}, {first: info, second: {}}

    def step(self, actions: dict) -> tuple:
        first, second = self.possible_agents
        if self._joined is dict:
            joined: Any = {first: actions[first], second: actions[second]}
        else:
            joined = (actions[first], actions[second])
        obs, reward, terminated, truncated, info = self.env.step(joined)
        reward = float(reward)
        if terminated or truncated:
            self.agents = []
        flag = {first: bool(terminated), second: bool(terminated)}
        cut = {first: bool(truncated), second: bool(truncated)}
        return {first: obs, second: obs}, {first: reward, second: -reward}, flag, cut, {first: info, second: {}}

    def render(self) -> Any:
        return self.env.render()

    def close(self) -> None:
        self.env.close()
