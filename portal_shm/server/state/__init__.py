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
otherwise ``StateError`` names both sides. This package runs inside env runtimes: Python 3.9
syntax, numpy, msgpack and what the env itself brings (ale_py, mujoco), imported only when used.

Parts: ``blob`` (the format, ``capture``, ``restore`` and the checks of a blob), ``adapters`` (which
adapter takes a base env), ``adapter_base`` (what every adapter is), one module per adapter
(``own_state``, ``ale_state``, ``mujoco_state``, ``pickled``, ``episode_end``), ``wrappers`` (the
chain and its wrappers' attributes), ``plain`` (values as msgpack-able data, generators) and
``versions`` (the runtime's package versions).
This module only names what callers import from ``portal_shm.server.state``.
"""

from __future__ import annotations

from .adapters import _BY_NAME as _BY_NAME
from .adapters import ADAPTERS as ADAPTERS
from .adapters import _adapter as _adapter
from .adapters import carries_mid_episode as carries_mid_episode
from .ale_state import _ALE_PROBE_FRAMES as _ALE_PROBE_FRAMES
from .ale_state import AleState as AleState
from .ale_state import _last_action as _last_action
from .ale_state import _set_last_action as _set_last_action
from .blob import FORMAT as FORMAT
from .blob import VERSION as VERSION
from .blob import Restored as Restored
from .blob import capture as capture
from .blob import restore as restore
from .episode_end import EpisodeEndState as EpisodeEndState
from .mujoco_state import MujocoState as MujocoState
from .own_state import OwnState as OwnState
from .pickled import PickledEnv as PickledEnv
from .plain import StateError as StateError
from .plain import _decode as _decode
from .plain import _encode as _encode
from .plain import _NotPlain as _NotPlain
from .versions import _installed_version as _installed_version
from .versions import _versions as _versions
from .versions import _versions_of as _versions_of
from .versions import warm as warm
from .wrappers import _chain as _chain
from .wrappers import _is_configuration as _is_configuration

__all__ = [
    "ADAPTERS",
    "FORMAT",
    "VERSION",
    "AleState",
    "EpisodeEndState",
    "MujocoState",
    "OwnState",
    "PickledEnv",
    "Restored",
    "StateError",
    "capture",
    "carries_mid_episode",
    "restore",
    "warm",
]
