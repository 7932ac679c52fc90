"""An env's state as a self-describing blob: saved in one runtime, restored in another.

A state is msgpack (``wire/protocol.py``), never pickle unless the caller opts in: a header
(format, version, env id and kwargs, the runtime's package versions, the adapter that made it)
and parts: the base env's own state by the first adapter that knows it, the state of every
wrapper of the chain (``TimeLimit``'s step count, frame stacks, episode counters, the presets'
max-pooling buffers and lives), the base env's ``np_random``, whether the server was about to
autoreset the env, and the observation the env last returned (what ``restore`` hands back: a
restored emulator's screen is stale until its next step). To the agent a state is opaque bytes.

Base env adapters, first match wins (``ADAPTERS``): the env's own ``get_state()``/``set_state(state)``;
ALE (``cloneState(include_rng=True)``: emulator, sticky-action RNG and last action); MuJoCo
(``mj_getState(mjSTATE_INTEGRATION)`` plus the derived quantities envs read between steps); with
``allow_pickle``, the whole base env pickled inside the runtime. These are complete: a state taken
mid-episode goes on mid-episode. Any other env has a state only at an episode's end, where its next
move is a reset (``EpisodeEndState``): its generators, its wrappers and the pending autoreset;
mid-episode ``capture`` refuses it. Wrappers are captured from their
attributes, which must be plain data (numbers, strings, arrays, lists, tuples, dicts, deques,
numpy generators) or known to be configuration (spaces, functions, ``AreaResize``); any other
attribute makes ``capture`` fail naming the wrapper, rather than lose state in silence. A wrapper
class with its own ``get_state()``/``set_state(state)`` is captured by those instead.

A state restores only into the same env id, kwargs and versions of the packages that define it;
otherwise ``StateError`` names both sides. This module runs inside env runtimes: Python 3.9
syntax, numpy, msgpack and what the env itself brings (ale_py, mujoco), imported only when used.
"""

from __future__ import annotations

import collections
import functools
import importlib.metadata
import inspect
import pickle
import random
import sys
import types
from typing import Any, Callable, NamedTuple, Optional

import numpy as np

from ..wire import protocol as P

FORMAT = "portal-shm-state"
VERSION = 2
_DISTRIBUTIONS = {"ale_py": "ale-py", "mujoco": "mujoco"}  # module -> distribution, where they differ
_ADAPTER_MODULES = {"ale": ("ale_py",), "mujoco": ("mujoco",)}
# Attributes of gymnasium's and gym's wrappers that are structure or cached configuration: the
# chain itself, spaces and spec (rebuilt by the target's own constructor, and checked through the
# env id and kwargs), and the base env's generator, which travels on its own (``_rng_state``).
_SKIP = frozenset(
    (
        "env",
        "_action_space",
        "_observation_space",
        "_reward_range",
        "_metadata",
        "_cached_spec",
        "_saved_kwargs",
        "_ezpickle_args",
        "_ezpickle_kwargs",
        "spec",
        "action_space",
        "observation_space",
        "reward_range",
        "metadata",
        "render_mode",
    )
)
# Classes whose instances are fixed by a wrapper's constructor arguments and never change after
# it (the target's constructor builds equal ones): safe to leave out, by full name so this module
# needs not import them.
_CONFIGURATION = frozenset(("portal_shm.server.presets.AreaResize",))
_CONFIG_TYPES = (types.FunctionType, types.BuiltinFunctionType, types.MethodType, functools.partial, type)
_TAG = "\x00portal-shm"  # first item of the tuples that stand for values msgpack has no type for
# MjData fields that mj_forward derives from the state and that envs read between steps (Ant's
# and Humanoid's rewards read body positions before stepping): saved as they were, because after
# ``mj_step`` they describe the last substep's start, which no recomputation from the state gives.
_MUJOCO_DERIVED = (
    "xpos",
    "xquat",
    "xmat",
    "xipos",
    "ximat",
    "xanchor",
    "xaxis",
    "geom_xpos",
    "geom_xmat",
    "site_xpos",
    "site_xmat",
    "cam_xpos",
    "cam_xmat",
    "subtree_com",
    "subtree_linvel",
    "subtree_angmom",
    "cinert",
    "cvel",
    "cacc",
    "cfrc_int",
    "cfrc_ext",
    "ten_length",
    "actuator_length",
    "actuator_velocity",
    "actuator_force",
    "qfrc_actuator",
    "qfrc_passive",
    "qfrc_bias",
    "qfrc_constraint",
    "qacc",
    "sensordata",
    "energy",
)


class StateError(Exception):
    """A state that cannot be taken or restored here; the message says why and what would work."""


class _NotPlain(Exception):
    """A value with no plain-data encoding; ``args[0]`` says where in the value it sits."""


def _versions(chain: list, adapter: Any) -> dict:
    """The versions of the packages that define this env's behaviour: those of the classes of its
    chain (gymnasium or gym, ale_py ...), the adapter's and numpy's (arrays and generators), and
    Python's for the message. Not every installed package: a Pong state does not depend on
    ViZDoom being installed beside it."""
    modules = {type(link).__module__.partition(".")[0] for link in chain}
    return dict(_versions_of(frozenset(modules), adapter.name))


@functools.lru_cache(maxsize=256)
def _versions_of(modules: frozenset, adapter_name: str) -> tuple:
    """``_versions`` for the top-level modules of a chain's classes: the same every time a
    runtime asks (what it imported does not change under it)."""
    wanted = set(modules) | {"numpy"} | set(_ADAPTER_MODULES.get(adapter_name, ()))
    out = {"python": "%d.%d" % sys.version_info[:2]}
    for module in sorted(wanted - {"portal_shm", "__main__", "builtins"}):
        name = _DISTRIBUTIONS.get(module, module)
        version = _installed_version(name)
        if version is not None:
            out[name] = version
    return tuple(out.items())


@functools.lru_cache(maxsize=None)
def _installed_version(name: str) -> Optional[str]:
    """A distribution's version, None for a module of none (a script's, an image's /opt/envs).
    Read once per process: parsing its metadata takes a millisecond, which a recycling swap pays
    in every state, and what a running runtime imported does not change under it."""
    try:
        return importlib.metadata.version(name)
    except (importlib.metadata.PackageNotFoundError, ValueError):
        return None


def warm(envs: list) -> None:
    """Read now what restoring a state into these envs reads of the runtime (their packages'
    versions): a spare standing by does, and a zygote before it forks, so that no swap pays it in
    its ``set_state`` (~9 ms in a fork). An env this module cannot describe is left to its restore."""
    for env in envs:
        try:
            chain = _chain(env)
            for adapter in [a for a in ADAPTERS if a.matches(chain[-1])] + [PickledEnv]:
                _versions(chain, adapter)
        except Exception:
            pass


def _describe(versions: dict) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(versions.items())) or "no known packages"


def _chain(env: Any) -> list:
    """The wrappers from the outside in, then the base env."""
    chain = [env]
    inner = _attrs(env).get("env")
    while inner is not None and inner is not chain[-1]:
        chain.append(inner)
        inner = _attrs(inner).get("env")
    return chain


def _attrs(obj: Any) -> dict:
    """The instance's own attributes: never ``getattr``, which legacy gym wrappers forward inward."""
    return getattr(obj, "__dict__", None) or {}


def _class_name(obj: Any) -> str:
    return f"{type(obj).__module__}.{type(obj).__qualname__}"


# -- plain data ---------------------------------------------------------------------------------
def _encode(value: Any, where: str) -> Any:
    """``value`` as msgpack-able data (a copy: arrays are copied, deques and generators tagged)."""
    if value is None or isinstance(value, (bool, float, str, bytes, np.generic)):
        return value
    if isinstance(value, int):
        return value if -(2**63) <= value < 2**63 else (_TAG, "int", str(value))  # PCG64's 128-bit state
    if isinstance(value, np.ndarray):
        if value.dtype.hasobject:
            raise _NotPlain(f"{where} (an array of Python objects)")
        return value.copy()
    if isinstance(value, collections.deque):
        items = [_encode(v, f"{where}[{i}]") for i, v in enumerate(value)]
        return (_TAG, "deque", items, value.maxlen)
    if isinstance(value, tuple):
        return tuple(_encode(v, f"{where}[{i}]") for i, v in enumerate(value))
    if isinstance(value, list):
        return [_encode(v, f"{where}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, dict):
        if not all(isinstance(k, (str, int)) for k in value):
            raise _NotPlain(f"{where} (a dict with keys other than strings and ints)")
        return {k: _encode(v, f"{where}[{k!r}]") for k, v in value.items()}
    if isinstance(value, np.random.Generator):
        return (_TAG, "generator", _encode(value.bit_generator.state, where))
    if isinstance(value, np.random.RandomState):
        return (_TAG, "randomstate", _encode(value.get_state(legacy=False), where))
    if type(value) is random.Random:  # (not SystemRandom, which has no state)
        return (_TAG, "random", _encode(value.getstate(), where))
    raise _NotPlain(f"{where} (a {_class_name(value)})")


_BIT_GENERATORS = frozenset({"PCG64", "PCG64DXSM", "MT19937", "Philox", "SFC64"})


def _decode(value: Any) -> Any:
    if isinstance(value, tuple) and len(value) >= 2 and isinstance(value[0], str) and value[0] == _TAG:
        kind = value[1]
        if kind == "int":
            return int(value[2])
        if kind == "deque":
            return collections.deque([_decode(v) for v in value[2]], maxlen=value[3])
        if kind == "generator":
            state = _decode(value[2])
            if state.get("bit_generator") not in _BIT_GENERATORS:
                raise StateError(f"a state names the bit generator {state.get('bit_generator')!r:.40}, not numpy's")
            generator = np.random.Generator(getattr(np.random, state["bit_generator"])())
            generator.bit_generator.state = state
            return generator
        if kind == "randomstate":
            random_state = np.random.RandomState()
            random_state.set_state(_decode(value[2]))
            return random_state
        if kind == "random":
            generator = random.Random()
            try:
                generator.setstate(_decode(value[2]))
            except (TypeError, ValueError) as exc:
                raise StateError(f"a state holds a random.Random state that Python refuses: {exc}") from None
            return generator
        raise StateError(f"a state value of unknown kind {kind!r}: a newer portal-shm made it")
    if isinstance(value, tuple):
        return tuple(_decode(v) for v in value)
    if isinstance(value, list):
        return [_decode(v) for v in value]
    if isinstance(value, dict):
        return {k: _decode(v) for k, v in value.items()}
    return value


_GENERATORS = (np.random.Generator, np.random.RandomState, random.Random)


def _is_generator(value: Any) -> bool:
    return isinstance(value, _GENERATORS) and not isinstance(value, random.SystemRandom)


def _is_configuration(value: Any) -> bool:
    """Fixed by the constructor's arguments, so the target env already holds an equal one:
    functions, classes, spaces, specs and the classes of ``_CONFIGURATION``."""
    return _configuration_type(type(value))


@functools.lru_cache(maxsize=1024)
def _configuration_type(cls: type) -> bool:
    """``_is_configuration`` by the value's class alone, so asked once per class: an exact restart
    takes a state at every episode's end (``loop.py``), where this ran for every attribute."""
    if issubclass(cls, _CONFIG_TYPES) or f"{cls.__module__}.{cls.__qualname__}" in _CONFIGURATION:
        return True
    for base in cls.__mro__:
        if (base.__name__ == "Space" and ".spaces" in base.__module__) or base.__name__ in ("EnvSpec", "WrapperSpec"):
            return True
    return False


def _own_methods(obj: Any) -> bool:
    """Whether the class itself defines get_state/set_state (legacy gym wrappers forward any
    attribute to the env they wrap, so the instance would seem to have the base env's)."""
    cls = type(obj)
    return callable(getattr(cls, "get_state", None)) and callable(getattr(cls, "set_state", None))


# -- wrappers -----------------------------------------------------------------------------------
def _wrapper_state(wrapper: Any) -> list:
    """``[how, values]``: the wrapper's own ``get_state()``, or its attributes but configuration."""
    name = type(wrapper).__qualname__
    if _own_methods(wrapper):
        try:
            return ["own", _encode(wrapper.get_state(), f"{name}.get_state()")]
        except _NotPlain as exc:
            raise StateError(
                f"wrapper {name}'s get_state() returned {exc.args[0]}, which a state cannot carry: "
                "return plain data (numbers, strings, bytes, arrays, lists, tuples, dicts)"
            ) from None
    values = {}
    for key, value in _attrs(wrapper).items():
        if key in _SKIP or _is_configuration(value):
            continue
        try:
            values[key] = _encode(value, f"{name}.{key}")
        except _NotPlain as exc:
            raise StateError(
                f"wrapper {_class_name(wrapper)} keeps state a portal-shm state cannot carry: {exc.args[0]}. "
                f"Give {name} get_state() and set_state(state) methods that return and take plain data "
                "(numbers, strings, bytes, arrays, lists, dicts), or keep that attribute plain"
            ) from None
    return ["vars", values]


def _restore_wrapper(wrapper: Any, how: str, values: Any) -> None:
    """``values`` decoded: the wrapper's own ``set_state``, else its attributes set back.

    Only attributes ``capture`` would have saved from this very wrapper are set: a state comes
    from outside (an agent, a file), and must not reach the chain itself, configuration, or
    names the wrapper does not have."""
    if how == "own" and _own_methods(wrapper):
        wrapper.set_state(values)
        return
    if how != "vars" or not isinstance(values, dict):
        raise StateError(f"a state for wrapper {_class_name(wrapper)} of unknown form {how!r}")
    current = _attrs(wrapper)
    for key in values:
        if (
            not isinstance(key, str)
            or key.startswith("__")
            or key in _SKIP
            or key not in current
            or _is_configuration(current[key])
        ):
            raise StateError(
                f"the state sets {key!r:.60} on wrapper {_class_name(wrapper)}, which a state of it never holds"
            )
    for key, value in values.items():
        setattr(wrapper, key, value)


# -- base env adapters --------------------------------------------------------------------------
class OwnState:
    """Envs with ``get_state()``/``set_state(state)`` of their own: they know their state best."""

    name = "own"

    @staticmethod
    def matches(base: Any) -> bool:
        return _own_methods(base) and _one_argument(type(base).set_state)

    @staticmethod
    def save(base: Any, resets_next: bool) -> Any:
        try:
            return _encode(base.get_state(), f"{type(base).__qualname__}.get_state()")
        except _NotPlain as exc:
            raise StateError(
                f"{_class_name(base)}.get_state() returned {exc.args[0]}, which a state cannot carry: "
                "return plain data (numbers, strings, bytes, arrays, lists, tuples, dicts)"
            ) from None

    @staticmethod
    def load(base: Any, payload: Any) -> None:
        base.set_state(_decode(payload))


class AleState:
    """ALE games (``ale_py.env.AtariEnv``): ``cloneState(include_rng=True)`` is the emulator and the
    sticky-action RNG, but not the last action ALE executed, which a sticky frame repeats and
    ``restoreState`` leaves as it was (so a restored Pong would move its paddle as the target env
    last did). ``_last_action`` finds an action that acts as the saved one: the same emulator
    states frame by frame from the state on. AtariEnv's Python side holds only its construction
    arguments and ``np_random`` (stochastic frame skips), which travels for every env. The
    screen stays stale after ``restoreState`` until the next ``act``, hence the saved observation."""

    name = "ale"

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


class MujocoState:
    """MuJoCo envs (gymnasium's ``MujocoEnv``: ``model`` and ``data``): ``mjSTATE_INTEGRATION`` is
    everything ``mj_step`` reads (time, qpos, qvel, act, warm start, controls, applied forces,
    mocap, user data, plugin state), so the next step is the original one bit for bit. The fields
    envs read between steps are derived, and saved as they were (``_MUJOCO_DERIVED``)."""

    name = "mujoco"

    @staticmethod
    def matches(base: Any) -> bool:
        data = _attrs(base).get("data")
        return (
            type(data).__name__ == "MjData" and type(data).__module__.startswith("mujoco") and "model" in _attrs(base)
        )

    @staticmethod
    def save(base: Any, resets_next: bool) -> Any:
        import mujoco

        spec = mujoco.mjtState.mjSTATE_INTEGRATION
        state = np.empty(mujoco.mj_stateSize(base.model, spec), np.float64)
        mujoco.mj_getState(base.model, base.data, state, spec)
        derived = {name: np.array(getattr(base.data, name)) for name in _MUJOCO_DERIVED if hasattr(base.data, name)}
        return {"integration": state, "derived": derived}

    @staticmethod
    def load(base: Any, payload: Any) -> None:
        import mujoco

        spec = mujoco.mjtState.mjSTATE_INTEGRATION
        state = payload["integration"]
        if state.shape != (mujoco.mj_stateSize(base.model, spec),):
            raise StateError(
                f"a MuJoCo state of {state.shape[0]} numbers does not fit this model's "
                f"{mujoco.mj_stateSize(base.model, spec)}: restore it into an env of the same model"
            )
        mujoco.mj_setState(base.model, base.data, state, spec)
        mujoco.mj_forward(base.model, base.data)  # every derived field consistent, then as saved
        for name, value in payload["derived"].items():
            getattr(base.data, name)[...] = value


class PickledEnv:
    """The opt-in fallback: the base env pickled, and unpickled only in an env runtime that was
    told to (``allow_pickle``): unpickling runs whatever the blob says. Never on the agent side."""

    name = "pickle"

    @staticmethod
    def matches(base: Any) -> bool:
        return True

    @staticmethod
    def save(base: Any, resets_next: bool) -> Any:
        try:
            return pickle.dumps(base)
        except Exception as exc:
            raise StateError(
                f"{_class_name(base)} cannot be pickled ({type(exc).__name__}: {exc}): give the env "
                "get_state()/set_state(state) methods that return and take plain data"
            ) from None

    @staticmethod
    def load(base: Any, payload: Any) -> None:
        vars(base).update(vars(pickle.loads(payload)))


class EpisodeEndState:
    """Any other env, only at an episode's end (its next move is a reset, not yet made).

    There, a gymnasium env's future is its reset and what follows, and it draws all of that from
    its generators: ``np_random`` (which every state carries, ``_rng_state``) and any numpy or
    ``random.Random`` generator it holds as an attribute of its own (saved here). Its wrappers
    travel as in every state, and so does the pending autoreset. Its dynamic state (positions, a
    physics world, a game engine) is not here, and does not matter since the reset rebuilds it:
    ``capture`` takes this only at an episode's end, and ``restore`` refuses one that claims
    another moment. What it cannot know: randomness drawn from anywhere else (numpy's or
    ``random``'s global generators, an engine's own RNG that its reset does not reseed, counters
    kept across episodes by the base env)."""

    name = "episode-end"

    @staticmethod
    def matches(base: Any) -> bool:
        return True

    @staticmethod
    def save(base: Any, resets_next: bool) -> Any:
        name = type(base).__qualname__
        generators = {
            key: _encode(value, f"{name}.{key}")
            for key, value in _attrs(base).items()
            if key not in _RNG_ATTRIBUTES and _is_generator(value)
        }
        return {"generators": generators}

    @staticmethod
    def load(base: Any, payload: Any) -> None:
        generators = payload.get("generators") if isinstance(payload, dict) else None
        if not isinstance(generators, dict):
            raise StateError(f"an episode-end state for {_class_name(base)} without its generators")
        decoded = {key: _decode(value) for key, value in generators.items()}
        for key, value in decoded.items():
            named = isinstance(key, str) and key.isidentifier() and not key.startswith("__")
            if not named or key in _SKIP or key in _RNG_ATTRIBUTES:
                raise StateError(f"the state sets {key!r:.60} on {_class_name(base)}, which a state of it never holds")
            current = _attrs(base).get(key, getattr(type(base), key, None))
            if not _is_generator(value) or not (current is None or _is_generator(current)):
                raise StateError(
                    f"the state sets {key!r:.60} on {_class_name(base)} to something other than a generator, "
                    "which an episode-end state never holds"
                )
        for key, value in decoded.items():
            setattr(base, key, value)


ADAPTERS = (OwnState, AleState, MujocoState)  # complete: a state of theirs is one at any moment
_BY_NAME = {adapter.name: adapter for adapter in ADAPTERS + (PickledEnv, EpisodeEndState)}
_RNG_ATTRIBUTES = ("_np_random", "np_random")  # the base env's generator, carried by ``_rng_state``


def _one_argument(method: Callable) -> bool:
    """``set_state(state)``, not e.g. MujocoEnv's ``set_state(qpos, qvel)``."""
    try:
        params = list(inspect.signature(method).parameters.values())[1:]
    except (TypeError, ValueError):
        return True
    required = [p for p in params if p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return len(required) <= 1 and (len(params) >= 1 or any(p.kind is p.VAR_POSITIONAL for p in params))


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


def _rng_state(base: Any) -> Any:
    """The base env's generator and seed (gymnasium: ``_np_random``, created lazily; old gym:
    ``np_random``, a RandomState), read without creating one."""
    own = _attrs(base)
    rng = own.get("_np_random", own.get("np_random"))
    if rng is None:
        return None
    try:
        return {"np_random": _encode(rng, "np_random"), "seed": own.get("_np_random_seed")}
    except _NotPlain:
        return None  # not a numpy generator (an env's own object): its adapter carries it


def _restore_rng(base: Any, saved: Any) -> None:
    """The generator back, and gymnasium's ``np_random_seed`` beside it (a fresh env that was
    never reset holds it only as its class's default, not as an attribute of its own)."""
    own = _attrs(base)
    name = "_np_random" if "_np_random" in own or "np_random" not in own else "np_random"
    rng = _decode(saved["np_random"])
    if not _is_generator(rng):
        raise StateError(f"a state's generator for {_class_name(base)} is not a generator")
    setattr(base, name, rng)
    seed = saved.get("seed")
    if isinstance(seed, int) and ("_np_random_seed" in own or hasattr(type(base), "_np_random_seed")):
        setattr(base, "_np_random_seed", seed)


def _spec_kwargs(env: Any) -> dict:
    """The env's registered kwargs that a state depends on (sticky actions, frame skip, limits), as
    ``repr`` strings: compared, never evaluated."""
    spec = getattr(env, "spec", None)
    out = {str(k): repr(v) for k, v in dict(getattr(spec, "kwargs", None) or {}).items() if k != "render_mode"}
    if getattr(spec, "max_episode_steps", None) is not None:
        out["max_episode_steps"] = repr(spec.max_episode_steps)
    return out


# -- capture and restore ------------------------------------------------------------------------
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
        return P.packb(state)
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
        state = P.unpackb(blob)
    except P.ProtocolError as exc:
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
