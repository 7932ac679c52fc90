"""Which adapter takes an env's base state: the complete ones in order, first match wins, then
the opt-in pickle, then the episode's end. Each adapter is a class of static methods (``name``,
``packages``, ``matches``, ``save``, ``load``) in a module of its own."""

from __future__ import annotations

from typing import Any

from .ale_state import AleState
from .episode_end import EpisodeEndState
from .mujoco_state import MujocoState
from .own_state import OwnState
from .pickled import PickledEnv
from .plain import StateError, _class_name
from .wrappers import _chain

ADAPTERS = (OwnState, AleState, MujocoState)  # complete: a state of theirs is one at any moment
_BY_NAME = {adapter.name: adapter for adapter in ADAPTERS + (PickledEnv, EpisodeEndState)}


def carries_mid_episode(env: Any) -> bool:
    """Whether ``env``'s state can be taken at any moment (an adapter knows its base env), not
    only at an episode's end; what a server tells the agent at its handshake (recycling)."""
    try:
        base = _chain(env)[-1]
        return any(adapter.matches(base) for adapter in ADAPTERS)
    except Exception:
        return False


def _adapter(base: Any, allow_pickle: bool, episode_end: bool) -> Any:
    for adapter in ADAPTERS:
        if adapter.matches(base):
            return adapter
    if allow_pickle:
        return PickledEnv
    if episode_end:
        return EpisodeEndState
    raise StateError(
        f"{_class_name(base)} has no state adapter (there are: own get_state/set_state, ALE, MuJoCo) and "
        "its episode is under way: such an env has a state only at an episode's end (its generators; in "
        "NextStep or Disabled mode, after the step that ended it: in SameStep the step resets it at once). "
        "Take it there, give the env get_state()/set_state(state) methods, or ask for allow_pickle=True "
        "(the env is then pickled inside its runtime; the agent only ever sees bytes)"
    )
