"""PettingZoo envs as ordinary gymnasium envs with fixed spaces: every portal kind carries them.

No transport of its own: an adapter turns one multi-agent env into one gymnasium env whose spaces
never change, so process, venv, docker, remote and Ray portals, lockstep and async batches,
autoreset modes and restarts all work unchanged. Use these entry points as env ids (the agent side
is ``portal_shm.make_vec_ma``, which builds the kwargs and gives per-agent views)::

    make_vec("portal_shm.server.multi_agent:parallel", 8,
             env_id="mpe2.simple_spread_v3:parallel_env", max_cycles=25)
    make_vec("portal_shm.server.multi_agent:aec", 16, env_id="classic/tictactoe-v3")
    make_vec("portal_shm.server.multi_agent:two_player", 4, env_id="my_games:Fight2P")

``env_id`` is an id of PettingZoo's registry (``"butterfly/pistonball-v6"``, PettingZoo 1.27+) or
the env's ``"package.module:callable"`` (a gymnasium id or entry point for ``two_player``). The
env's own kwargs go in ``env_kwargs={...}``, where any name reaches it unchanged (an env's own
``env_id`` or ``groups`` included: ``make_vec_ma`` always passes them so); other keyword arguments
than the adapter's own (``groups``, ``dead_obs``, ``info_action_mask``, ``env_kwargs``) go to it
too. The PettingZoo package is imported only there, inside the env's runtime. The names follow
the presets' convention (``env_id`` names the inner env), so a remote host's policy checks the
inner env and its kwargs, nested ones as its own, against its allow-lists as it checks a preset's:
an operator allows e.g. ``--entry-points 'portal_shm.server.multi_agent:*,mpe2.*:*'``.

Layout. Possible agents are grouped by identical (observation space, action space), in their
order (or as ``groups={"name": [agent, ...]}`` says; agents with different spaces in one group are
refused, never padded). A group is named after its agents' shared stem (``piston_0``... ->
``piston``), else after its first agent. The env's observation is a Dict with one entry per group
of ``k`` agents, each a Dict of stacked fields:

- ``obs``: the agents' observations, ``(k, ...)`` (PettingZoo's ``observation`` when the env puts
  an ``action_mask`` beside it);
- ``reward`` ``(k,)`` float64, ``terminated``, ``truncated``, ``mask`` ``(k,)`` bool;
- ``action_mask`` ``(k, ...)``: the env's own, from the observation dict, or from
  ``infos[agent]["action_mask"]`` with ``info_action_mask=True`` (Discrete actions; all ones where
  an info has none).

The action space is a Dict of each group's stacked action space (``Discrete(n)`` -> ``MultiDiscrete
([n] * k)``, ``Box`` -> ``Box((k, ...))``). The env-level reward is the sum of the agents' (for
logging only). Per-agent infos ride in the env's info as ``info["agents"][agent]`` (only
non-empty ones).

Dead-agent contract (parallel envs; AEC below):

- ``mask`` is 1 for the agents in the env's ``agents`` after the call: they act on the next step.
  Only their actions are passed to the env; whatever a masked slot holds is never read.
- On the call an agent leaves (it drops out of ``agents``), its slot has mask 0, its reward for
  that step and PettingZoo's ``terminated``/``truncated`` for it (an agent that leaves with
  neither set counts as terminated): one of them is True exactly once.
- On that call its observation (and action mask) is its real last one: the final one where the
  env gave one, else the last it had (a time limit bootstraps from it, in every view).
- While it is absent after that: mask 0, reward 0, both flags False, and its observation (and
  action mask) is zeros (``dead_obs="zeros"``, the default, SuperSuit's black death) or that
  last one, kept (``dead_obs="last"``).
- An agent that comes back (PettingZoo#661) has mask 1 again and ``info["returned"][group]``, a
  ``(k,)`` bool array, is True in its slot on the call it returns (the key is there only then).
- The env's episode ends when ``agents`` is empty: ``truncated`` when every agent that ended on
  that call was truncated and not terminated (a time limit), ``terminated`` otherwise. It then
  autoresets as a single-agent env does, in the portal's autoreset mode. At a reset, agents not in
  ``agents`` have mask 0 and zero observations.

Turn-based (AEC) envs: each call runs the env to its next decision point. Only the slot of
``agent_selection`` has mask 1, with the observation and the reward that ``last()`` gives (the
reward accumulated since that agent last acted, PettingZoo's ``_cumulative_rewards``); the other
slots have reward 0 and keep the observation they had at their own last decision (zeros before
their first one). Agents whose episode ended are stepped with ``None`` as PettingZoo's own loop
does and reported on that call with the reward ``last()`` gave them and their flags, as above.

Runs inside env runtimes: Python 3.9, numpy and gymnasium (which PettingZoo needs anyway). This
module imports its parts, and so gymnasium, only when an entry point is called: a bare env
runtime imports every env-side module without them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional, Sequence

if TYPE_CHECKING:
    from .adapter import EnvSource
    from .aec_adapter import AECAdapter
    from .parallel_adapter import ParallelAdapter

__all__ = ["aec", "parallel", "two_player"]


def parallel(
    env_id: EnvSource,
    groups: Optional[dict] = None,
    dead_obs: str = "zeros",
    info_action_mask: bool = False,
    env_kwargs: Optional[dict] = None,
    **kwargs: Any,
) -> ParallelAdapter:
    """A PettingZoo ParallelEnv (``env_id``, made with ``env_kwargs`` and ``kwargs``) as one
    fixed-space gymnasium env."""
    from .adapter import load
    from .parallel_adapter import ParallelAdapter

    return ParallelAdapter(
        load(env_id, _env_kwargs(env_kwargs, kwargs), "parallel"), groups, dead_obs, info_action_mask
    )


def aec(
    env_id: EnvSource,
    groups: Optional[dict] = None,
    dead_obs: str = "zeros",
    info_action_mask: bool = False,
    env_kwargs: Optional[dict] = None,
    **kwargs: Any,
) -> AECAdapter:
    """A PettingZoo AECEnv (turn-based) as one fixed-space gymnasium env stepped decision by decision."""
    from .adapter import load
    from .aec_adapter import AECAdapter

    return AECAdapter(load(env_id, _env_kwargs(env_kwargs, kwargs), "aec"), groups, dead_obs, info_action_mask)


def two_player(
    env_id: EnvSource,
    agents: Optional[Sequence[str]] = None,
    groups: Optional[dict] = None,
    dead_obs: str = "zeros",
    env_kwargs: Optional[dict] = None,
    **kwargs: Any,
) -> ParallelAdapter:
    """A 2-player zero-sum gymnasium env with one scalar reward (the first player's) as two agents
    with rewards ``(r, -r)`` (``two_players.TwoPlayerEnv``). ``env_id``: a gymnasium id, an entry
    point or a callable."""
    from ..envs import make_env
    from .parallel_adapter import ParallelAdapter
    from .two_players import TwoPlayerEnv

    kwargs = _env_kwargs(env_kwargs, kwargs)
    game = env_id(**kwargs) if callable(env_id) else make_env(env_id, kwargs)
    return ParallelAdapter(TwoPlayerEnv(game, agents), groups, dead_obs)


def _env_kwargs(nested: Optional[dict], flat: dict) -> dict:
    """The env's kwargs: ``env_kwargs`` (any names, ``env_id`` and ``groups`` included) beside the
    flat ones (names the adapter does not take itself)."""
    if nested is None:
        return flat
    if not isinstance(nested, dict):
        raise TypeError(f"env_kwargs must be a dict of the env's keyword arguments, got {type(nested).__name__}")
    twice = sorted(set(nested) & set(flat))
    if twice:
        raise TypeError(f"env kwargs {twice} are given both in env_kwargs and as keyword arguments: give them once")
    return {**flat, **nested}
