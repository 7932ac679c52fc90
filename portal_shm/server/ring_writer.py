"""An env server's views of the attached ring: it reads its envs' actions there and writes their
observations (checked as SyncVectorEnv writes them, ``obs_check.py``), rewards, flags and infos.

Infos (and the leaves of an observation with a variable layout) are encoded into the env's row of
``info``; one too big for it spills into the step's ``extras``, sent beside it over ZeroMQ.
Python 3.9 syntax: this runs in env runtimes.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

import numpy as np

from ..wire import trees
from ..wire.info_codec import InfoCodec
from ..wire.schema import is_fixed, leaves
from .errors import error_message
from .obs_check import LeafCheck, leaf_name


class RingWriter:
    """The rows of envs ``env_indices`` in the ring's ``views``, for observations of ``obs_schema``
    and actions of ``act_schema``. ``batch``: one native vector env steps them all, whose
    observations arrive (and are checked) as one array (``native.py``)."""

    def __init__(
        self, views: dict, obs_schema: dict, act_schema: dict, env_indices: list, info_codec: InfoCodec, batch: bool
    ) -> None:
        self.views = views
        self.env_indices = env_indices
        self.info_codec = info_codec  # what the agent said of values msgpack cannot carry exactly
        self.obs_schema = obs_schema
        self.obs_fixed: list = []  # (get the leaf, its view, its check) of each fixed-layout leaf
        self.obs_var: list = []  # (leaf number, get the leaf) of each variable-layout one
        for index, (path, leaf) in enumerate(leaves(obs_schema)):
            if is_fixed(leaf):
                view = views[f"obs.{index}"]  # each leaf written as SyncVectorEnv writes it (``obs_check.py``)
                check = LeafCheck(view.shape[2:], view.dtype, leaf_name(path))
                self.obs_fixed.append((_leaf_getter(path), view, check.check))
            else:
                self.obs_var.append((index, _leaf_getter(path)))
        # Actions with a variable layout (Text, Graph, custom spaces...) come as a message instead.
        self.read_action = _action_reader(act_schema, views, [0]) if is_fixed(act_schema) else None
        self.act_view = views.get("act.0")
        self.single_action = "act.1" not in views
        # The observation array itself when the observation is a single fixed-layout leaf
        # (a Box, Discrete...): the hot path then writes it without walking the tree.
        self.whole_obs = (
            self.obs_fixed[0][1]
            if len(self.obs_fixed) == 1 and not self.obs_var and leaves(obs_schema)[0][0] == ()
            else None
        )
        self.whole_check = self.obs_fixed[0][2] if self.whole_obs is not None else None
        if batch and self.whole_obs is not None:  # a native batch's: all its envs' in one array
            rows = self.whole_obs[0, env_indices]
            self.whole_check = LeafCheck(rows.shape, rows.dtype, batch=True).check
        first, last = env_indices[0], env_indices[-1] + 1
        self.rows: Any = slice(first, last) if env_indices == list(range(first, last)) else env_indices
        self.reward = views["reward"]
        self.terminated = views["terminated"]
        self.truncated = views["truncated"]
        self.info_len = views["info_len"]
        self.info = views["info"]
        self.info_capacity = self.info.shape[2]
        self.last_slot = 0  # the slot observations were last written to (``last_obs``)
        self.last_var_obs: list = [None] * len(env_indices)

    def write(self, k: int, j: int, i: int, obs: Any, payload: list) -> None:
        """Env ``j``'s (index ``i``) observation into slot ``k``; its variable-layout leaves into
        ``payload``, to go with its infos (``blob``)."""
        for get, array, check in self.obs_fixed:
            array[k, i] = check(get(obs))
        if self.obs_var:
            payload.append(self.remember(j, obs))

    def remember(self, j: int, obs: Any) -> dict:
        """The observation's variable-layout leaves, kept for ``last_obs`` (also of an observation
        not written: a recycled server's, already in the ring)."""
        var = {index: get(obs) for index, get in self.obs_var}
        self.last_var_obs[j] = var
        return var

    def keep(self, k: int, prev: int, j: int, i: int, extras: dict) -> None:
        """Env ``j`` not reset: slot ``k`` shows the observation it showed in slot ``prev``."""
        for _, array, _ in self.obs_fixed:
            array[k, i] = array[prev, i]
        self.publish(k, i, [], [self.last_var_obs[j]] if self.obs_var else [], extras)

    def publish(self, k: int, i: int, infos: list, payload: list, extras: dict) -> None:
        """Write the env's infos (and variable-layout obs) blob, spilling to ZeroMQ when big."""
        if not payload and not any(infos):
            self.info_len[k, i] = 0
            return
        self.info_len[k, i] = self.blob(k, i, infos, payload, extras)

    def blob(self, k: int, i: int, infos: list, payload: list, extras: dict, columns: Optional[dict] = None) -> int:
        """Encode the env's infos (and variable-layout obs; and a native batch's ``columns``: the
        infos of all this server's envs) into its row, or into ``extras`` when too big for it;
        returns the length to write to ``info_len`` (-1: spilled)."""
        blob = self.info_codec.entry(i, infos, payload[0] if payload else None, columns)
        if len(blob) <= self.info_capacity:
            self.info[k, i, : len(blob)] = np.frombuffer(blob, np.uint8)
            return len(blob)
        extras[i] = blob
        return -1

    def write_results(
        self, k: int, rewards: Any, terminateds: Any, truncateds: Any, lengths: list, errors: list
    ) -> None:
        """A step's rewards, flags and infos lengths into slot ``k``, one numpy call each; values
        numpy refuses are written again one env at a time, so that the env that returned them is
        the one reported (in ``errors``)."""
        rows = self.rows
        self.info_len[k, rows] = lengths
        try:
            self.reward[k, rows] = rewards
            self.terminated[k, rows] = terminateds
            self.truncated[k, rows] = truncateds
        except Exception:
            for j, i in enumerate(self.env_indices):
                try:
                    self.reward[k, i] = rewards[j]
                    self.terminated[k, i] = terminateds[j]
                    self.truncated[k, i] = truncateds[j]
                except Exception as exc:
                    errors.append(error_message(exc, i, "step"))

    def act_rows(self, k: int) -> np.ndarray:
        """This server's actions of slot ``k``, as one array (a native batch's)."""
        return self.act_view[k, self.rows]

    def last_obs(self, j: int) -> Any:
        """Env ``j``'s observation as it last wrote it into the ring (and beside it)."""
        i, k, var = self.env_indices[j], self.last_slot, self.last_var_obs[j] or {}
        fixed = {
            index: self.views[f"obs.{index}"]
            for index, (_, leaf) in enumerate(leaves(self.obs_schema))
            if is_fixed(leaf)
        }
        return trees.unflatten(
            (
                fixed[index][k, i].copy() if index in fixed else var.get(index)
                for index in range(len(leaves(self.obs_schema)))
            ),
            self.obs_schema,
        )


def _leaf_getter(path: tuple) -> Callable[[Any], Any]:
    def get(value: Any) -> Any:
        for part in path:
            value = value[part]
        return value

    return get


def _action_reader(schema: dict, views: dict, counter: list) -> Callable[[int, int], Any]:
    """Build a function (slot, env_index) -> action with the structure of the action space."""
    kind = schema["kind"]
    if kind == "Dict":
        parts = [(key, _action_reader(sub, views, counter)) for key, sub in schema["spaces"]]
        return lambda k, i: {key: read(k, i) for key, read in parts}
    if kind == "Tuple":
        items = [_action_reader(sub, views, counter) for sub in schema["spaces"]]
        return lambda k, i: tuple(read(k, i) for read in items)
    array = views[f"act.{counter[0]}"]
    counter[0] += 1
    if array.ndim == 2:
        if array.dtype.kind == "f":
            # A scalar action of a float32 Box arrives as np.float64 (same value), which is also a
            # Python float: what an env gets from gymnasium's vector envs when the agent passes
            # float64 actions, and what APIs such as time.sleep() or math functions accept.
            return lambda k, i: np.float64(array[k, i])
        return lambda k, i: array[k, i]
    return lambda k, i: array[k, i].copy()
