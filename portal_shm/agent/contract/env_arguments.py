"""Which of ``make_vec``'s keyword arguments are the backend's and which the env's: ``split_kwargs``.

A keyword named exactly like an option of the backend configures the backend; every other one goes
to the env, whose arguments are arbitrary. A typo of an option (``imag=`` for docker's ``image=``)
would reach the env, which then fails blaming itself, so a name *close* to a backend option or a
``vector_kwargs`` key (difflib's ratio ``CLOSE`` or more: ``imag`` -> ``image`` is 0.89,
``render_mode`` -> ``autoreset_mode`` 0.64 is not) is checked against what the env takes, as far
as the agent can tell without starting it (``env_keywords``):

- the env does not take it: ``TypeError`` naming the option meant, before any server starts;
- the env takes it (or any keyword: ``**kwargs``): it goes to the env, silently;
- the agent cannot tell (the id is registered only in the env's runtime, as ALE's are until
  ``ale_py`` is imported; an entry point whose module the agent has not imported): it goes to the
  env, with a warning naming the option it is close to.

So a legitimate env argument is never refused, and ``env_kwargs={...}`` passes one unchecked (and
without a warning). What the agent knows of an env is its own version's: a runtime with another
version that takes a new keyword close to an option needs ``env_kwargs``.
"""

from __future__ import annotations

import importlib
import inspect
import sys
import warnings
from typing import Any, Callable, Optional, Union

from ...errors import close_match

#: How close a keyword must be to an option for the check (difflib's ratio).
CLOSE = 0.8
#: ``env_keywords``'s answer for an env that takes any keyword (``**kwargs``).
ANY = True


def split_kwargs(
    env_id: str, backend: str, option_names: set[str], vector_names: tuple[str, ...], kwargs: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the backend's options, the env's kwargs) of ``kwargs``; a keyword close to an option that the
    env does not take is refused (the module docstring has the rule)."""
    options = {key: value for key, value in kwargs.items() if key in option_names}
    env = {key: value for key, value in kwargs.items() if key not in option_names}
    meant = {}
    for name in env:
        option = close_match(name, option_names, CLOSE)
        vector = close_match(name, vector_names, CLOSE)
        if option is not None:
            meant[name] = f"{option}= (an option of the {backend!r} backend)"
        elif vector is not None:
            meant[name] = f"vector_kwargs={{{vector!r}: ...}} (an option of the portal)"
    if meant:
        taken = env_keywords(env_id)
        for name, option in meant.items():
            if taken is ANY or (isinstance(taken, set) and name in taken):
                continue
            if taken is None:
                warnings.warn(
                    f"{name}= goes to the env {env_id!r}, though it looks like {option}; whether the env "
                    f"takes it cannot be told here. If it is the env's, pass env_kwargs={{{name!r}: ...}} "
                    "(which this does not warn about)",
                    UserWarning,
                    stacklevel=4,
                )
                continue
            raise TypeError(
                f"{name}= is neither an option of the {backend!r} backend nor an argument of the env {env_id!r}; "
                f"did you mean {option}? An argument meant for the env goes in env_kwargs={{{name!r}: ...}}, unchecked"
            )
    return options, env


def env_keywords(env_id: str) -> Union[None, bool, set[str]]:
    """The keyword arguments env ``env_id`` takes, as far as the agent can tell without starting it:
    a set of names; ``ANY`` (True) for an env that takes any (``**kwargs``); None where it cannot tell.

    A registered id: its spec's kwargs, ``gymnasium.make``'s own keywords and its entry point's
    parameters (the entry point's module imported only if it is gymnasium's own, or imported
    already). An entry point ``"module:callable"``: the callable's parameters, if its module is
    imported already. Nothing else is imported: an env's packages may exist only in its runtime.
    """
    if ":" in env_id:
        return _parameters(_loaded(env_id, may_import=False))
    try:
        import gymnasium
    except ImportError:
        return None
    spec = gymnasium.envs.registry.get(env_id)
    if spec is None:
        return None
    entry = spec.entry_point
    if isinstance(entry, str):
        target = _loaded(entry, may_import=entry.startswith("gymnasium."))
    else:
        target = entry
    taken = _parameters(target)
    if not isinstance(taken, set):
        return taken
    return taken | set(spec.kwargs) | (_names(gymnasium.make) - {"id"})


def _loaded(entry_point: str, may_import: bool) -> Optional[Callable[..., Any]]:
    """The callable ``"module:attr"`` names, if its module is imported (or ``may_import``), else None."""
    module_name, _, attr = entry_point.partition(":")
    module = sys.modules.get(module_name)
    if module is None and may_import:
        try:
            module = importlib.import_module(module_name)
        except Exception:  # its dependencies are missing here (Box2D, MuJoCo): cannot tell
            return None
    target: Any = module
    for part in attr.split(".") if module is not None else ():
        target = getattr(target, part, None)
    return target if callable(target) else None


def _parameters(target: Optional[Callable[..., Any]]) -> Union[None, bool, set[str]]:
    """The names ``target`` takes as keywords; ``ANY`` where it takes ``**kwargs``; None if unknown."""
    if target is None:
        return None
    try:
        parameters = inspect.signature(target).parameters.values()
    except (TypeError, ValueError):
        return None
    if any(p.kind is p.VAR_KEYWORD for p in parameters):
        return ANY
    return _names(target)


def _names(target: Callable[..., Any]) -> set[str]:
    """The parameters of ``target`` that take a keyword (its ``**kwargs`` aside)."""
    try:
        parameters = inspect.signature(target).parameters.values()
    except (TypeError, ValueError):
        return set()
    return {p.name for p in parameters if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
