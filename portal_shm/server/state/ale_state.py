"""The adapter for ALE games: the emulator and its RNG, and the last action a sticky frame repeats."""

from __future__ import annotations

from typing import Any

from .adapter_base import Adapter
from .plain import StateError, _attrs


class AleState(Adapter):
    """ALE games (``ale_py.env.AtariEnv``): ``cloneState(include_rng=True)`` is the emulator and the
    sticky-action RNG, but not the last action ALE executed, which a sticky frame repeats and
    ``restoreState`` leaves as it was (so a restored Pong would move its paddle as the target env
    last did). ``_last_action`` finds an action that acts as the saved one: the same emulator
    states frame by frame from the state on. AtariEnv's Python side holds only its construction
    arguments and ``np_random`` (stochastic frame skips), which travels for every env. The
    screen stays stale after ``restoreState`` until the next ``act``, hence the saved observation."""

    name = "ale"
    packages: tuple = ("ale_py",)

    @staticmethod
    def matches(base: Any) -> bool:
        ale = _attrs(base).get("ale")
        return ale is not None and hasattr(ale, "cloneState") and hasattr(ale, "restoreState")

    @staticmethod
    def save(base: Any, resets_next: bool) -> Any:
        ale = base.ale
        state = ale.cloneState(include_rng=True)
        # An env reset before it steps again needs no last action: ALE's reset overwrites it (the
        # console restarts and runs no-op frames; tests/integration/test_env_state.py checks games).
        sticky = ale.getFloat("repeat_action_probability") > 0 and not resets_next
        last = _last_action(ale, state) if sticky else None
        return {"emulator": state.serialize(), "last_action": None if last is None else int(last.value)}

    @staticmethod
    def load(base: Any, payload: Any) -> None:
        import ale_py

        state = ale_py.ALEState(payload["emulator"])
        if payload["last_action"] is None:
            base.ale.restoreState(state)
        else:
            _set_last_action(base.ale, state, ale_py.Action(payload["last_action"]))


# ALE frames emulated to tell or set the last action: a run of sticky frames longer than this has
# probability 0.25**32 (5e-20) at ALE's default repeat_action_probability.
_ALE_PROBE_FRAMES = 32


def _set_last_action(ale: Any, state: Any, action: Any) -> None:
    """``state`` restored with ``action`` as the last one executed: acting sets it once a frame is
    not sticky, and restoring the state again rewinds all else (emulator and RNG) but that."""
    ale.restoreState(state)
    for _ in range(_ALE_PROBE_FRAMES):
        ale.act(action)
    ale.restoreState(state)


def _trace(ale: Any, state: Any, frames: int) -> Any:
    """The emulator states of the frames from ``state`` on under no-ops (sticky frames execute the
    last action): where the last action matters, these differ."""
    import ale_py

    ale.restoreState(state)
    for _ in range(frames):
        ale.act(ale_py.Action.NOOP)
        yield ale.cloneState().serialize()


def _last_action(ale: Any, state: Any) -> Any:
    """An action that acts as the one ALE last executed, from ``state`` on; ``ale`` is left at
    ``state`` with that action as its last one (its future unchanged)."""
    actual = list(_trace(ale, state, _ALE_PROBE_FRAMES))
    candidates = list(dict.fromkeys(list(ale.getMinimalActionSet()) + list(ale.getLegalActionSet())))
    for action in candidates:
        _set_last_action(ale, state, action)
        if all(a == b for a, b in zip(actual, _trace(ale, state, _ALE_PROBE_FRAMES))):
            _set_last_action(ale, state, action)
            return action
    ale.restoreState(state)
    raise StateError(
        "no ALE action reproduces this game's sticky frames (the last action was a paddle's "
        "continuous strength?): make the env with repeat_action_probability=0.0 to save its state"
    )
