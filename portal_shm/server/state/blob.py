"""A state as bytes: its header (format, version, env id and kwargs, runtime versions, adapter),
``capture`` and ``restore``, and the checks a blob passes before any env is touched."""

from __future__ import annotations

from typing import Any, NamedTuple, Optional

from ...wire.protocol import ProtocolError, packb, unpackb
from .adapters import _BY_NAME, _adapter
from .episode_end import EpisodeEndState
from .pickled import PickledEnv
from .plain import StateError, _class_name, _decode, _restore_rng, _rng_state
from .versions import _describe, _versions
from .wrappers import _chain, _restore_wrapper, _wrapper_state

FORMAT = "portal-shm-state"
VERSION = 2


def _spec_kwargs(env: Any) -> dict:
    """The env's registered kwargs that a state depends on (sticky actions, frame skip, limits), as
    ``repr`` strings: compared, never evaluated."""
    spec = getattr(env, "spec", None)
    out = {str(k): repr(v) for k, v in dict(getattr(spec, "kwargs", None) or {}).items() if k != "render_mode"}
    if getattr(spec, "max_episode_steps", None) is not None:
        out["max_episode_steps"] = repr(spec.max_episode_steps)
    return out


class Restored(NamedTuple):
    """What ``restore`` hands back, as it was when the state was taken."""

    obs: Any  # the observation the env had last returned
    info: dict
    autoreset: bool  # the server was to reset the env at its next step
    episode_end: bool  # only the episode's end travelled (``EpisodeEndState``): reset before it steps


def capture(
    env: Any,
    env_id: str,
    obs: Any,
    info: Optional[dict] = None,
    allow_pickle: bool = False,
    autoreset: bool = False,
    episode_end: bool = False,
) -> bytes:
    """The state of ``env`` (which last returned ``obs``) as bytes. ``autoreset``: the server was
    to reset the env at its next step (its episode had ended), which a restore must resume.
    ``episode_end``: the env's episode ended and it was not reset since, so an env no adapter
    knows has a state here (``EpisodeEndState``); anywhere else it is refused."""
    chain = _chain(env)
    base = chain[-1]
    wrappers = [[type(w).__qualname__] + _wrapper_state(w) for w in chain[:-1]]  # (its error comes first)
    adapter = _adapter(base, allow_pickle, episode_end)
    state = {
        "format": FORMAT,
        "version": VERSION,
        "env_id": env_id,
        "kwargs": _spec_kwargs(env),
        "runtime": _versions(chain, adapter),
        "adapter": adapter.name,
        "base": adapter.save(base, bool(autoreset)),
        "rng": _rng_state(base),
        "wrappers": wrappers,
        "autoreset": bool(autoreset or adapter is EpisodeEndState),
        "obs": obs,
        "info": info or {},
    }
    try:
        return packb(state)
    except (TypeError, ValueError, OverflowError) as exc:
        raise StateError(f"the state of env {env_id!r} cannot be encoded: {exc}") from None


def restore(env: Any, blob: Any, env_id: str, allow_pickle: bool = False) -> Restored:
    """Put ``env`` into the state ``blob``; returns the observation, the infos and whether the server
    is to autoreset it at its next step as they were when the state was taken (``Restored``).

    Everything that can be checked is checked before the env is touched. A pickled state is
    refused unless ``allow_pickle``: unpickling runs whatever the blob says."""
    chain = _chain(env)
    base = chain[-1]
    state = _checked(blob, env, env_id, chain)
    names = [type(w).__qualname__ for w in chain[:-1]]
    saved = state.get("wrappers") or []
    if [entry[0] for entry in saved] != names:
        raise StateError(
            f"the state's wrappers {[entry[0] for entry in saved]} differ from this env's {names}: "
            "restore it into an env made the same way"
        )
    adapter = _BY_NAME.get(state.get("adapter"))
    if adapter is None:
        raise StateError(f"unknown state adapter {state.get('adapter')!r}: a newer portal-shm made this state")
    if adapter is PickledEnv and not allow_pickle:
        raise StateError(
            "this state was pickled in the env's runtime; restoring it unpickles there, which runs code: "
            "pass allow_pickle=True to set_state if you trust where it came from"
        )
    if adapter is not PickledEnv and not adapter.matches(base):
        raise StateError(f"a state made by the {adapter.name} adapter does not fit {_class_name(base)}")
    if adapter is EpisodeEndState and state.get("autoreset") is not True:
        raise StateError("an episode-end state that is not at an episode's end: its env would go on without its state")
    wrappers = [(how, _decode(values)) for _, how, values in saved]
    adapter.load(base, state["base"])
    if state.get("rng") is not None:
        _restore_rng(base, state["rng"])
    for wrapper, (how, values) in zip(chain[:-1], wrappers):
        _restore_wrapper(wrapper, how, values)
    return Restored(state.get("obs"), state.get("info") or {}, bool(state.get("autoreset")), adapter is EpisodeEndState)


def _checked(blob: Any, env: Any, env_id: str, chain: list) -> dict:
    """The decoded state, once its header says it belongs to this env and runtime."""
    if not isinstance(blob, bytes):
        raise StateError(f"a state is bytes (from get_state), got {type(blob).__name__}")
    try:
        state = unpackb(blob)
    except ProtocolError as exc:
        raise StateError(f"not a portal-shm env state: {exc}") from None
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise StateError("not a portal-shm env state (no portal-shm-state header)")
    if state.get("version") != VERSION:
        raise StateError(
            f"a state of format version {state.get('version')!r}; this runtime reads version {VERSION}: "
            "save and restore with the same portal-shm"
        )
    if state.get("env_id") != env_id:
        raise StateError(f"a state of env {state.get('env_id')!r} cannot be restored into env {env_id!r}")
    theirs = state.get("runtime") or {}
    here = _versions(chain, _BY_NAME.get(state.get("adapter"), PickledEnv))
    differ = sorted(k for k in set(theirs) | set(here) if k != "python" and theirs.get(k) != here.get(k))
    if differ:
        detail = ", ".join(f"{k} {theirs.get(k) or 'absent'} there, {here.get(k) or 'absent'} here" for k in differ)
        raise StateError(
            f"this state of {env_id!r} was saved in another runtime ({detail}). It was saved under "
            f"{_describe(theirs)}; this runtime has {_describe(here)}: restore it into a runtime with "
            "the same versions (the same image, venv or requirements)"
        )
    kwargs, mine = state.get("kwargs") or {}, _spec_kwargs(env)
    if kwargs != mine:
        differ = sorted(k for k in set(kwargs) | set(mine) if kwargs.get(k) != mine.get(k))
        detail = ", ".join(f"{k}={kwargs.get(k, 'unset')} there, {mine.get(k, 'unset')} here" for k in differ)
        raise StateError(
            f"this state of {env_id!r} was saved in an env made with other kwargs ({detail}): "
            "restore it into envs made with the same kwargs"
        )
    return state
