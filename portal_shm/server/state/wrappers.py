"""An env's chain of wrappers: found from the outside in, each captured from its own attributes
(or its own ``get_state``/``set_state``) and set back only where ``capture`` would have read."""

from __future__ import annotations

import functools
import types
from typing import Any

from .plain import StateError, _attrs, _class_name, _encode, _NotPlain

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


def _chain(env: Any) -> list:
    """The wrappers from the outside in, then the base env."""
    chain = [env]
    inner = _attrs(env).get("env")
    while inner is not None and inner is not chain[-1]:
        chain.append(inner)
        inner = _attrs(inner).get("env")
    return chain


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
