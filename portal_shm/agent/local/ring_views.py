"""The agent's numpy views of the ring, and every read and write it makes of them.

One object owns the views (mailbox, observation leaves, rewards, flags, infos, action leaves) so
that the drivers (``lockstep.py``, ``batch_driver.py``) and recovery (``recovery.py``) never index
the ring themselves: actions in, observations and infos out, and the rows recovery makes up in
place of a failed server.
"""

from __future__ import annotations

from typing import Any, Callable, Optional, Sequence

import numpy as np
from gymnasium.spaces import Space

from ...errors import InfoEncodingError, ServerProtocolError
from ...wire import trees
from ...wire.schema import is_fixed, leaves, revive
from ...wire.stats import SAMPLED, SAMPLED_NS
from ..contract.actions import ActionLeaves
from ..contract.infos import add_info
from ..contract.kept_views import KeptViews, anchored, holders
from ..contract.validate import decode_infos
from .private_slots import PrivateSlots
from .reused_copies import ReusedCopies

#: ``pick(leaf index, ring array of that leaf)``: the part of a fixed leaf a batch returns.
Pick = Callable[[int, np.ndarray], Any]
#: One env's variable-layout observation leaves as decoded from its infos (leaf index -> value).
VarObs = dict[Any, Any]
#: What a compiled observation builder takes: ``(pick, var)`` (see ``RingViews.build``). ``var`` is
#: typed Any on purpose: a variable-layout leaf indexes it and each env's entry without a check, and
#: the TypeError, KeyError or IndexError of a missing one is what ``build`` reports.
BuildArg = tuple[Pick, Any]
#: ``save_rows``'s copy: observation leaves, infos lengths and infos bytes of some rows.
SavedRows = tuple[list[np.ndarray], np.ndarray, np.ndarray]


_NO_ENDS = np.zeros(0, np.int64)


class RingViews:
    """Views of one attached ring, for ``num_envs`` envs and ``ring_depth`` slots."""

    def __init__(
        self,
        views: dict[str, np.ndarray],
        obs_schema: dict[str, Any],
        act_schema: dict[str, Any],
        single_observation_space: Space[Any],
        single_action_space: Space[Any],
        ring_depth: int,
        info_capacity: int,
        unpickles: Optional[list[bool]] = None,
    ) -> None:
        self.mailbox = views["mailbox"]
        #: The servers' counters (``wire/stats.py``), read by ``agent/local/stats_reader.py``.
        self.stats_views = {name: views[name] for name in ("env_stats", "env_hist", "server_stats")}
        #: Ring bytes one env step writes and reads: its observation, action, reward, flags, infos length.
        self.env_step_bytes = sum(
            int(view[0, 0].nbytes) for name, view in views.items() if name.startswith(("obs.", "act."))
        ) + sum(int(views[name][0, 0].nbytes) for name in ("reward", "terminated", "truncated", "info_len"))
        self.reward, self.terminated, self.truncated = views["reward"], views["terminated"], views["truncated"]
        self.info_len, self.info = views["info_len"], views["info"]
        self.num_envs = self.reward.shape[1]
        self.ring_depth = ring_depth
        self.info_capacity = info_capacity
        self.obs_schema = obs_schema
        self.single_observation_space = single_observation_space
        #: Unbatched infos (one env's dict as it is), for ``Portal``, the one-env ``gymnasium.Env``.
        self.raw_infos = False
        #: Per env: whether its infos may hold pickled values (its runtime is no trust boundary).
        self.unpickles = list(unpickles) if unpickles is not None else [False] * self.num_envs
        #: Infos ``gather`` could not unpickle (``InfoEncodingError``s): the portal raises them once
        #: its drivers took every server's results (``VectorPortal._run``); those envs' infos are left out.
        self.refused: list[InfoEncodingError] = []
        #: ``copy=True``'s arrays, reused once the caller dropped them (``reused_copies.py``).
        self.copies = ReusedCopies()
        #: ``copy=True``'s observations over private mappings of the slots, where the lockstep
        #: driver chooses free slots (``private_slots.py``; set by the portal); None: copies.
        self.private: Optional[PrivateSlots] = None
        #: The slot handed out before each slot was written: a masked reset's and a restart's
        #: "last observation" (the lockstep driver sets it as it chooses slots).
        self.previous = [(k - 1) % ring_depth for k in range(ring_depth)]
        # Actions of spaces without a fixed layout are sent as a message (one per server and step):
        # then ``actions`` is None and the ring has no action leaves.
        fixed_actions = is_fixed(act_schema)
        self.act_leaves: list[np.ndarray] = (
            [views[f"act.{j}"] for j in range(len(leaves(act_schema)))] if fixed_actions else []
        )
        self.actions = ActionLeaves(act_schema, single_action_space) if fixed_actions else None
        obs_leaves = leaves(obs_schema)
        self.obs_by_index = {
            index: views[f"obs.{index}"] for index, (_, leaf) in enumerate(obs_leaves) if is_fixed(leaf)
        }
        self.obs_fixed = list(self.obs_by_index.values())
        self.var_spaces: dict[int, Any] = {
            index: trees.at(single_observation_space, path)
            for index, (path, leaf) in enumerate(obs_leaves)
            if not is_fixed(leaf)
        }
        #: Each env's last variable-layout observation leaves (leaf index -> value), or None.
        self.var_obs: list[Optional[VarObs]] = [None] * self.num_envs
        self._build = trees.builder(obs_schema, self._leaf_getter)
        # What a batch hands out: per slot, read-only views made once (``kept_views.anchored``), so
        # with ``copy=False`` a client that keeps one past its slot's reuse is found (``kept``).
        self._leaf_slots = {
            index: [anchored(array[k]) for k in range(ring_depth)] for index, array in self.obs_by_index.items()
        }
        self._obs_slots: Optional[list[Any]] = (
            None
            if self.var_spaces
            else [self._build((lambda index, array, k=k: self._leaf_slots[index][k], None)) for k in range(ring_depth)]
        )
        self._results = [
            (anchored(self.reward[k]), anchored(self.terminated[k]), anchored(self.truncated[k]))
            for k in range(ring_depth)
        ]
        self.kept = KeptViews("ring slot", f"ring_depth - 1 = {ring_depth - 1} further calls of step or reset")
        for k in range(ring_depth):
            handed = [leaves[k] for leaves in self._leaf_slots.values()] + list(self._results[k])
            tree = [] if self._obs_slots is None or isinstance(self._obs_slots[k], np.ndarray) else [self._obs_slots[k]]
            self.kept.watch(k, holders(handed) + tree)
        del handed, tree  # the counts are taken with the portal's own references only
        for k in range(ring_depth):
            self.kept.settle(k)

    def _leaf_getter(self, index: int, node: dict[str, Any]) -> Callable[[BuildArg], Any]:
        if is_fixed(node):
            array = self.obs_by_index[index]
            return lambda arg: arg[0](index, array)
        return lambda arg: tuple(env_var[index] for env_var in arg[1])

    # -- observations and results ----------------------------------------------------------
    @property
    def all_fixed(self) -> bool:
        """Whether every observation leaf lives in the ring (no variable-layout leaves)."""
        return self._obs_slots is not None

    def build(self, pick: Pick, var: Optional[Sequence[Optional[VarObs]]]) -> Any:
        """The observation tree of a batch: each fixed leaf ``pick(index, ring array)``, each
        variable-layout leaf from ``var`` (one decoded dict per env of the batch)."""
        try:
            return self._build((pick, var))
        except (KeyError, TypeError, IndexError) as exc:
            raise ServerProtocolError(f"an env sent an incomplete variable-layout observation: {exc}") from None

    def observations(self, k: int, copy: bool) -> Any:
        """Every env's observation in slot ``k``: views of the ring unless ``copy``."""
        if self._obs_slots is not None:
            obs = self._obs_slots[k]
        else:
            obs = self.build(lambda index, array: self._leaf_slots[index][k], self.var_obs)
        if not copy:
            return obs
        if self.private is not None:
            private = self.private.hand_out(k)
            if private is not None:
                return private
        return self.copies.tree(obs)

    def use_private_slots(self, fd: Optional[int], layout: dict[str, Any]) -> bool:
        """Hand out ``copy=True`` observations over private mappings of the ring segment ``fd``
        (fixed-layout observations only); False where they cannot be made (then every batch is copied)."""
        if self._obs_slots is None:
            return False
        fields = {field["name"]: field for field in layout["fields"]}
        self.private = PrivateSlots.of(
            fd,
            {index: fields[f"obs.{index}"] for index in self.obs_by_index},
            self.ring_depth,
            lambda leaf: self._build((lambda index, array: leaf(index), None)),
        )
        return self.private is not None

    def results(self, k: int, copy: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(reward, terminated, truncated) of slot ``k``: views of the ring unless ``copy``."""
        reward, terminated, truncated = self._results[k]
        if copy:
            return reward.copy(), terminated.copy(), truncated.copy()
        return reward, terminated, truncated

    def env_obs(self, slot: int, i: int) -> Any:
        """A copy of env ``i``'s observation in ``slot``, with the structure of its space."""
        var = self.var_obs[i]
        return trees.unflatten(
            (
                self.obs_by_index[index][slot, i].copy()
                if index in self.obs_by_index
                else (None if var is None else var.get(index))
                for index in range(len(self.obs_by_index) + len(self.var_spaces))
            ),
            self.obs_schema,
        )

    # -- actions -----------------------------------------------------------------------------
    def write_actions(self, k: int, actions: Any) -> None:
        """Every env's action into slot ``k`` (fixed-layout action spaces only)."""
        checker = self.actions
        assert checker is not None  # the drivers send other actions as messages
        for target, array in zip(self.act_leaves, checker.arrays(actions, self.num_envs)):
            np.copyto(target[k], array, casting="unsafe")

    def write_env_actions(self, k: int, rows: slice, arrays: list[np.ndarray], picked: Any) -> None:
        """The actions of envs ``rows`` into slot ``k``: ``arrays[leaf][picked]`` (from ``actions``)."""
        for target, array in zip(self.act_leaves, arrays):
            np.copyto(target[k, rows], array[picked], casting="unsafe")

    # -- infos -------------------------------------------------------------------------------
    def gather(
        self,
        k: int,
        extras: dict[int, bytes],
        infos: dict[str, Any],
        envs: Optional[list[int]] = None,
        first: int = -1,
        total: int = 0,
    ) -> dict[str, Any]:
        """Decode and batch the infos of ``envs`` (all by default), in env order, into ``infos``.

        Async batches put env ``envs[j]`` at position ``first + j`` of a batch of ``total`` envs;
        ``extras`` holds the blobs that did not fit their ring rows (env index -> bytes).
        """
        lengths = self.info_len[k].tolist()
        total = total or self.num_envs
        for j, i in enumerate(range(self.num_envs) if envs is None else envs):
            length = lengths[i]
            if length == 0:
                continue
            if length == -1 and i in extras:
                blob = extras[i]
            elif 0 < length <= self.info_capacity:
                blob = self.info[k, i, :length].tobytes()
            else:
                raise ServerProtocolError(f"env {i} wrote an invalid infos length {length}")
            try:
                env_infos, var_obs, columns = decode_infos(blob, i, self.unpickles[i])
            except InfoEncodingError as exc:
                self.refused.append(exc)
                continue
            position = i if first < 0 else first + j
            for env_info in env_infos:
                if env_info:
                    if self.var_spaces and "final_obs" in env_info:
                        env_info["final_obs"] = _revive(self.single_observation_space, env_info["final_obs"], i)
                    infos = self.add(infos, env_info, position, total, i)
            if columns is not None:
                infos = self.add_columns(infos, columns, i, envs, first, total)
            if var_obs is not None:
                self.var_obs[i] = {
                    index: _revive(self.var_spaces.get(index), value, i) for index, value in var_obs.items()
                }
        return infos

    def add(
        self, infos: dict[str, Any], env_info: dict[str, Any], position: int, total: int, env: int
    ) -> dict[str, Any]:
        """One env's infos into the batch at ``position``, as gymnasium batches them."""
        if self.raw_infos:
            return {**infos, **env_info}
        try:
            return add_info(infos, env_info, position, total)
        except Exception as exc:
            raise ServerProtocolError(f"env {env}'s infos cannot be batched with the others': {exc}") from None

    def add_columns(
        self,
        infos: dict[str, Any],
        columns: dict[str, list[Any]],
        env: int,
        envs: Optional[list[int]],
        first: int,
        total: int,
    ) -> dict[str, Any]:
        """A native server's infos of all its envs (``envs``), written as columns in the row of its
        first env: what ``add`` of each env's dict gives, with one numpy write per key."""
        if not envs or env != envs[0]:
            raise ServerProtocolError(f"env {env} wrote infos for envs of which it is not the first")
        count = len(envs)
        if any(len(values) != count for values in columns.values()):
            raise ServerProtocolError(f"env {env}'s server wrote infos columns of another length than its envs")
        start = envs[0] if first < 0 else first
        rows: Any = slice(start, start + count)
        if first < 0 and envs != list(range(start, start + count)):
            rows = envs
        if self.raw_infos:
            return {**infos, **{key: values[-1] for key, values in columns.items()}}
        try:
            for key, values in columns.items():
                array = infos.get(key)
                if array is None:
                    array = np.zeros(total, dtype=type(values[0]))  # typed by its first value, as add_info
                array[rows] = values
                mask = infos.get("_" + key)
                if mask is None:
                    mask = np.zeros(total, dtype=np.bool_)
                mask[rows] = True
                infos[key], infos["_" + key] = array, mask
        except Exception as exc:
            raise ServerProtocolError(f"env {env}'s server wrote infos columns that cannot be batched: {exc}") from None
        return infos

    # -- what recycling reads and resets --------------------------------------------------------
    def episode_ends(self, k: int) -> np.ndarray:
        """The envs whose episode ended in slot ``k`` (terminated or truncated), ascending."""
        flags = self.terminated[k] | self.truncated[k]
        if not flags.any():  # most steps: no end, and ``any`` is far cheaper than ``flatnonzero``
            return _NO_ENDS
        ended: np.ndarray = np.flatnonzero(flags)
        return ended

    def forget_samples(self, rows: Any) -> None:
        """Zero the sampled step counts of ``rows`` (a fresh server's start from 0; ``stats`` keeps the
        totals): the step times then measured are the fresh server's alone."""
        env_stats = self.stats_views["env_stats"]
        env_stats[rows, SAMPLED] = 0
        env_stats[rows, SAMPLED_NS] = 0

    # -- rows recovery writes in place of a server ---------------------------------------------
    def clear_results(self, k: int, rows: Any) -> None:
        """Reward 0 and no episode end for ``rows`` of slot ``k`` (a reset's step)."""
        self.reward[k, rows] = 0.0
        self.terminated[k, rows] = False
        self.truncated[k, rows] = False

    def truncate(self, k: int, prev: int, rows: Any) -> None:
        """``rows`` of slot ``k``: their observation of slot ``prev``, reward 0, truncated, no infos."""
        for view in self.obs_fixed:
            view[k, rows] = view[prev, rows]
        self.clear_results(k, rows)
        self.truncated[k, rows] = True
        self.info_len[k, rows] = 0

    def save_rows(self, k: int, rows: slice) -> SavedRows:
        """A copy of what a reset wrote into ``rows`` of slot ``k``: observations and infos."""
        return (
            [view[k, rows].copy() for view in self.obs_fixed],
            self.info_len[k, rows].copy(),
            self.info[k, rows].copy(),
        )

    def restore_rows(self, k: int, rows: slice, saved: SavedRows) -> None:
        """``save_rows``'s copy into slot ``k`` as the result of a step (reward 0, no episode end)."""
        obs, info_len, info = saved
        for view, values in zip(self.obs_fixed, obs):
            view[k, rows] = values
        self.clear_results(k, rows)
        self.info_len[k, rows] = info_len
        self.info[k, rows] = info


def _revive(space: Any, value: Any, env: int) -> Any:
    try:
        return value if space is None else revive(space, value)
    except Exception as exc:  # the value came from an env runtime: malformed is a protocol error
        raise ServerProtocolError(f"env {env} sent a value that does not fit {space}: {exc}") from None
