"""Agents grouped by their spaces, and the fixed-size arrays one env's agents are written into.

A group is a list of agents with one observation space and one action space: the ring holds one
slot per agent of it, stacked (``(k, ...)`` per field). Agents whose spaces differ go in separate
groups, never padded into one space. Runs inside env runtimes (Python 3.9, numpy, gymnasium).
"""

from __future__ import annotations

import re
from typing import Any, Callable, Optional

import numpy as np
from gymnasium import spaces
from gymnasium.vector.utils import batch_space, create_empty_array

from ...wire.schema import space_to_schema

DEAD_OBS = ("zeros", "last")
FLAGS = ("terminated", "truncated", "mask")
_BOOL = np.bool_


def _stem(agent: str) -> str:
    """``"piston_3"`` -> ``"piston"``: the name PettingZoo's numbered agents share."""
    return re.sub(r"_?\d+$", "", agent) or agent


def _split_mask(space: Any) -> tuple:
    """PettingZoo's masked observations (a Dict with ``action_mask`` beside ``observation``): the
    part that goes to the group's ``obs`` field and the mask's space (None without one)."""
    if not isinstance(space, spaces.Dict) or "action_mask" not in space.spaces:
        return space, None
    rest = {key: sub for key, sub in space.spaces.items() if key != "action_mask"}
    obs = rest["observation"] if list(rest) == ["observation"] else spaces.Dict(rest)
    return obs, space.spaces["action_mask"]


class Group:
    """Agents that share one observation space and one action space: one stacked slot each.

    ``mask_source``: where the action mask comes from, ``"obs"`` (PettingZoo's observation dict),
    ``"info"`` (``infos[agent]["action_mask"]``, with ``info_action_mask=True``) or None.
    """

    def __init__(self, name: str, agents: list, observation_space: Any, action_space: Any, info_mask: bool) -> None:
        self.name, self.agents = name, list(agents)
        self.observation_space, self.action_space = observation_space, action_space
        self.obs_space, mask_space = _split_mask(observation_space)
        self.mask_source: Optional[str] = "obs" if mask_space is not None else None
        if mask_space is None and info_mask:
            if not isinstance(action_space, spaces.Discrete):
                raise ValueError(
                    f"info_action_mask=True needs Discrete actions, group {name!r} has {action_space}: "
                    "leave info_action_mask off for it"
                )
            mask_space = spaces.Box(0, 1, (int(action_space.n),), np.int8)
            self.mask_source = "info"
        self.mask_space = mask_space

    def space(self) -> spaces.Dict:
        """The group's part of the env's observation space: every field stacked over its agents."""
        k = len(self.agents)
        flag = spaces.Box(0, 1, (k,), _BOOL)
        fields = {
            "obs": batch_space(self.obs_space, k),
            # float64: the agent gets exactly the rewards the env computed (PettingZoo's are Python floats)
            "reward": spaces.Box(-np.inf, np.inf, (k,), np.float64),
            "terminated": flag,
            "truncated": flag,
            "mask": flag,
        }
        if self.mask_space is not None:
            fields["action_mask"] = batch_space(self.mask_space, k)
        return spaces.Dict(fields)

    def layout(self) -> dict:
        """What the agent side needs to know of this group (msgpack-able): ``MultiAgentPortal`` reads it."""
        return {
            "name": self.name,
            "agents": list(self.agents),
            "observation_space": space_to_schema(self.obs_space),
            "action_space": space_to_schema(self.action_space),
            "action_mask": self.mask_source is not None,
        }


def make_groups(
    possible_agents: list,
    observation_space: Callable[[str], Any],
    action_space: Callable[[str], Any],
    groups: Optional[dict] = None,
    info_action_mask: bool = False,
) -> list:
    """Group ``possible_agents``: by identical (observation space, action space) in their order, or
    as ``groups`` (``{name: [agent, ...]}``) says, which must name every agent once with equal spaces."""
    agents = [str(a) for a in possible_agents]
    if not agents:
        raise ValueError("the env has no possible_agents: a multi-agent env needs at least one agent")
    if groups is None:
        buckets: list = []
        for agent in agents:
            obs, act = observation_space(agent), action_space(agent)
            for bucket in buckets:
                if bucket[1] == obs and bucket[2] == act:
                    bucket[0].append(agent)
                    break
            else:
                buckets.append(([agent], obs, act))
        stems = [_stem(b[0][0]) if len({_stem(a) for a in b[0]}) == 1 else b[0][0] for b in buckets]
        names = [stem if stems.count(stem) == 1 else b[0][0] for stem, b in zip(stems, buckets)]
        if len(set(names)) != len(names):
            raise ValueError(
                f"the agents' spaces make groups {[b[0] for b in buckets]} whose names {names} clash: "
                "name them with groups={name: [agent, ...]}"
            )
        return [Group(n, b[0], b[1], b[2], info_action_mask) for n, b in zip(names, buckets)]
    named = [str(a) for members in groups.values() for a in members]
    missing = [a for a in agents if a not in named]
    unknown = sorted(set(named) - set(agents))
    twice = sorted({a for a in named if named.count(a) > 1})
    if missing or unknown or twice:
        raise ValueError(
            f"groups= must name every possible agent exactly once: missing {missing}, unknown {unknown}, "
            f"named twice {twice} (possible agents: {agents})"
        )
    out = []
    for name, members in groups.items():
        members = [str(a) for a in members]
        if not members:
            raise ValueError(f"groups[{name!r}] is empty: give every group at least one agent")
        first = members[0]
        for agent in members[1:]:
            if observation_space(agent) != observation_space(first) or action_space(agent) != action_space(first):
                raise ValueError(
                    f"groups[{name!r}] puts agents with different spaces together: {first!r} has "
                    f"{observation_space(first)} / {action_space(first)}, {agent!r} has "
                    f"{observation_space(agent)} / {action_space(agent)}; a group's agents share one slot layout, "
                    "so put them in separate groups (or leave groups= out to group agents by their spaces)"
                )
        out.append(Group(str(name), members, observation_space(first), action_space(first), info_action_mask))
    return out


def _put(out: Any, i: int, value: Any) -> None:
    if isinstance(out, dict):
        for key in out:
            _put(out[key], i, value[key])
    elif isinstance(out, tuple):
        for sub, part in zip(out, value):
            _put(sub, i, part)
    else:
        out[i] = value


def _copy(out: Any, src: Any, i: int) -> None:
    if isinstance(out, dict):
        for key in out:
            _copy(out[key], src[key], i)
    elif isinstance(out, tuple):
        for sub, part in zip(out, src):
            _copy(sub, part, i)
    else:
        out[i] = src[i]


def _zero(out: Any, i: int) -> None:
    if isinstance(out, dict):
        for sub in out.values():
            _zero(sub, i)
    elif isinstance(out, tuple):
        for sub in out:
            _zero(sub, i)
    else:
        out[i] = 0


def take(actions: Any, i: int) -> Any:
    """Agent ``i``'s action out of a group's stacked actions (arrays, or dicts and tuples of them)."""
    if isinstance(actions, dict):
        return {key: take(value, i) for key, value in actions.items()}
    if isinstance(actions, tuple):
        return tuple(take(value, i) for value in actions)
    return actions[i]


class AgentSlots:
    """The observation one env hands its server each call: per group, one slot per agent.

    Two buffers take turns, so the observation returned by one call stays intact while the next
    is written (SameStep autoreset packs the final observation after ``reset`` has returned). A
    call writes the slots of the agents it has news of; every other slot keeps what it held. On the
    call an agent's episode ends its slot holds its real last observation, whatever ``dead_obs``
    says (a time limit bootstraps from it, as from SuperSuit's rows); from the next call on it
    holds ``dead_obs``: zeros (SuperSuit's black death) or that last observation, kept.
    """

    def __init__(self, groups: list, dead_obs: str) -> None:
        if dead_obs not in DEAD_OBS:
            raise ValueError(f"dead_obs must be one of {DEAD_OBS}, got {dead_obs!r}")
        self.groups, self.dead_obs = groups, dead_obs
        self.where = {agent: (group, i) for group in groups for i, agent in enumerate(group.agents)}
        self.space = spaces.Dict({group.name: group.space() for group in groups})
        self.buffers = [_drop_batch(create_empty_array(self.space, 1, fn=np.zeros)) for _ in range(2)]
        self.turn = 0
        self.touched: set = set()
        self.ended: set = set()  # agents whose episode ended on the last call: dead from the next
        self.returned: dict = {}
        self.infos: dict = {}

    @property
    def current(self) -> dict:
        return self.buffers[self.turn]

    def begin(self, fresh: bool = False) -> None:
        """Start a call: the other buffer, rewards 0, flags and masks False, no news yet; ``fresh``
        (a reset): every slot zeros, so nothing of the last episode shows in the new one; else the
        agents that ended on the last call get their dead observation (``dead_obs``)."""
        self.turn ^= 1
        for group in self.groups:
            fields = self.current[group.name]
            fields["reward"][:] = 0.0
            for flag in FLAGS:
                fields[flag][:] = False
        zeroed = set(self.where) if fresh else self.ended if self.dead_obs == "zeros" else set()
        for agent in zeroed:
            group, i = self.where[agent]
            _zero(self.current[group.name]["obs"], i)
            if group.mask_source is not None:
                _zero(self.current[group.name]["action_mask"], i)
        self.touched, self.ended = set(zeroed), set()
        self.returned, self.infos = {}, {}

    def observe(self, agent: str, obs: Any, info: Any = None) -> None:
        """The agent's fresh observation (and action mask) into its slot."""
        group, i = self.where[agent]
        fields = self.current[group.name]
        if group.mask_source == "obs":
            _put(fields["action_mask"], i, obs["action_mask"])
            rest = {key: value for key, value in obs.items() if key != "action_mask"}
            obs = rest["observation"] if list(rest) == ["observation"] else rest
        elif group.mask_source == "info":
            mask = (info or {}).get("action_mask")
            fields["action_mask"][i] = 1 if mask is None else mask
        _put(fields["obs"], i, obs)
        self.touched.add(agent)

    def info(self, agent: str, info: Any) -> None:
        """The agent's info, when it has one (``infos["agents"][agent]`` on the agent side)."""
        if info:
            group, _ = self.where[agent]
            if group.mask_source == "info":
                info = {key: value for key, value in info.items() if key != "action_mask"}
            if info:
                self.infos[agent] = info

    def set_mask(self, agent: str) -> None:
        group, i = self.where[agent]
        self.current[group.name]["mask"][i] = True

    def reward(self, agent: str, reward: Any) -> None:
        group, i = self.where[agent]
        self.current[group.name]["reward"][i] = reward

    def end(
        self,
        agent: str,
        terminated: bool,
        truncated: bool,
        final_obs: Any = None,
        has_obs: bool = False,
        info: Any = None,
    ) -> None:
        """The agent's episode ended on this call: its flags, and its final observation (and the
        mask of its ``info``) where the env gave one, else the last it had: its real last one."""
        group, i = self.where[agent]
        fields = self.current[group.name]
        fields["terminated"][i] = terminated or not truncated  # one that leaves without a flag is terminated
        fields["truncated"][i] = truncated
        if has_obs:
            self.observe(agent, final_obs, info)
        self.ended.add(agent)

    def came_back(self, agent: str) -> None:
        group, i = self.where[agent]
        flags = self.returned.setdefault(group.name, np.zeros(len(group.agents), _BOOL))
        flags[i] = True

    def finish(self) -> tuple:
        """The call's observation and its env-level info: untouched slots keep what they held."""
        old = self.buffers[self.turn ^ 1]
        for agent, (group, i) in self.where.items():
            if agent not in self.touched:
                _copy(self.current[group.name]["obs"], old[group.name]["obs"], i)
                if group.mask_source is not None:
                    _copy(self.current[group.name]["action_mask"], old[group.name]["action_mask"], i)
        info: dict = {}
        if self.infos:
            info["agents"] = self.infos
        if self.returned:
            info["returned"] = self.returned
        return self.current, info

    def total_reward(self) -> float:
        return float(sum(float(fields["reward"].sum()) for fields in self.current.values()))


def _drop_batch(value: Any) -> Any:
    """``create_empty_array(space, 1)`` adds a batch axis of 1: the env's own observation has none."""
    if isinstance(value, dict):
        return {key: _drop_batch(sub) for key, sub in value.items()}
    if isinstance(value, tuple):
        return tuple(_drop_batch(sub) for sub in value)
    return value[0]


def episode_flags(ended: dict) -> tuple:
    """The env's own (terminated, truncated) once no agent is left: truncated when every agent that
    ended on the last call was truncated and not terminated (a time limit), terminated otherwise."""
    truncated = bool(ended) and all(trunc and not term for term, trunc in ended.values())
    return not truncated, truncated
