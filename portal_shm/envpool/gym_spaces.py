"""gymnasium's spaces as the old ``gym`` package's classes, for envpool's ``env_type="gym"``.

Why: envpool 0.x gave its gym type ``gym.spaces`` objects, and scripts written for it check their
class (cleanrl's ``assert isinstance(envs.action_space, gym.spaces.Discrete)``). gymnasium's classes
are other types than gym's, so such a check fails on a space that is otherwise the same. ``gym`` stays
optional: where it is not installed the spaces stay gymnasium's, as everywhere else in portal-shm.

Made for gym 0.26.2 (the last release; it imports beside numpy 2); gym 0.23.1, which cleanrl's envpool
setup pinned, converts Box, Discrete, MultiDiscrete, MultiBinary, Dict and Tuple too (Text and Sequence
came later). Each converted space gets a copy of the original's sampling generator, so
``action_space.sample()`` draws what the gymnasium space would have drawn next.
"""

from __future__ import annotations

import collections
import importlib
import warnings
from types import ModuleType
from typing import Any, NoReturn, Optional

import gymnasium
import numpy as np


def import_gym() -> Optional[ModuleType]:
    """The ``gym`` package, or None when it is not installed. An installed gym that fails to import
    (gym 0.2x under a numpy it predates, a missing dependency) is also None, with a warning saying why,
    since the pool works as well with gymnasium's classes and only class checks tell them apart."""
    try:
        return importlib.import_module("gym")
    except ModuleNotFoundError as error:
        if error.name == "gym":
            return None
        reason: BaseException = error
    except Exception as error:  # gym's own import code, run against today's numpy and Python
        reason = error
    warnings.warn(
        f"env_type='gym': the gym package is installed but its import failed ({type(reason).__name__}: {reason}), "
        "so the spaces are gymnasium's classes, and isinstance checks against gym.spaces fail. Install a gym that "
        "imports here (gym==0.26.2 does with numpy 2) or use gymnasium's classes in the script",
        RuntimeWarning,
        stacklevel=4,  # the caller of envpool.make
    )
    return None


def to_gym(space: gymnasium.Space, gym: ModuleType) -> Any:
    """``space`` as the same space of ``gym.spaces`` (``gym`` is the imported package), its sampling
    generator's state copied; a TypeError names a space that gym has no class for."""
    spaces = gym.spaces
    if isinstance(space, gymnasium.spaces.Box):
        converted = spaces.Box(space.low.copy(), space.high.copy(), space.shape, space.dtype)
    elif isinstance(space, gymnasium.spaces.Discrete):
        start = int(space.start)
        converted = spaces.Discrete(int(space.n), start=start) if start else spaces.Discrete(int(space.n))
    elif isinstance(space, gymnasium.spaces.MultiDiscrete):
        if np.any(space.start != 0):
            _refuse(space, gym, f"its start={space.start.tolist()} (gym's MultiDiscrete always starts at 0)")
        converted = spaces.MultiDiscrete(space.nvec.copy(), dtype=space.dtype)
    elif isinstance(space, gymnasium.spaces.MultiBinary):
        converted = spaces.MultiBinary(space.n)
    elif isinstance(space, gymnasium.spaces.Tuple):
        converted = spaces.Tuple([to_gym(sub, gym) for sub in space.spaces])
    elif isinstance(space, gymnasium.spaces.Dict):  # an OrderedDict: gym's Dict sorts the keys of a plain dict
        converted = spaces.Dict(collections.OrderedDict((key, to_gym(sub, gym)) for key, sub in space.spaces.items()))
    elif isinstance(space, gymnasium.spaces.Text):
        text = _class(spaces, "Text", space, gym)
        converted = text(space.max_length, min_length=space.min_length, charset=space.character_set)
    elif isinstance(space, gymnasium.spaces.Sequence):
        if space.stack:
            _refuse(space, gym, "stack=True (gym's Sequence gives tuples, not stacked arrays)")
        converted = _class(spaces, "Sequence", space, gym)(to_gym(space.feature_space, gym))
    elif isinstance(space, gymnasium.spaces.Graph):
        _refuse(space, gym, "the env's graphs are gymnasium's GraphInstance, which gym's Graph does not contain")
    else:
        _refuse(space, gym, f"its class {type(space).__module__}.{type(space).__name__}")
    if not isinstance(space, (gymnasium.spaces.Tuple, gymnasium.spaces.Dict)):  # those draw from their parts
        _copy_generator(space, converted)
    return converted


def _class(spaces: ModuleType, name: str, space: gymnasium.Space, gym: ModuleType) -> Any:
    cls = getattr(spaces, name, None)
    if cls is None:
        _refuse(space, gym, f"gym.spaces.{name}, which this gym release does not have (gym 0.26 has it)")
    return cls


def _refuse(space: gymnasium.Space, gym: ModuleType, what: str) -> NoReturn:
    raise TypeError(
        f"{space!r} has no counterpart in gym {gym.__version__}'s spaces: {what}. env_type='gym' converts the "
        "spaces to gym's classes when gym is installed; make the pool with env_type='gymnasium' to keep "
        "gymnasium's classes"
    )


def _copy_generator(source: gymnasium.Space, target: Any) -> None:
    """The state of ``source``'s generator into ``target``'s where both are of one kind (PCG64 Generators,
    unless a caller gave another; gym before 0.22 drew from a RandomState, which is left as it is)."""
    origin, copy = source.np_random.bit_generator, getattr(target.np_random, "bit_generator", None)
    if type(origin) is type(copy):
        copy.state = origin.state
