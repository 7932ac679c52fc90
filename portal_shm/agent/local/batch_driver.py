"""Async batches driver (envpool style): ``send``, ``recv`` and ``async_reset`` of a VectorPortal.

Which servers are stepping, ready or idle lives in ``batches.py``; this class owns everything
else a batch needs: each server's ring slot, the messages and stand-ins of finished servers, and
the arrays a batch is gathered into. A batch is a set of whole servers; ``recv`` returns ring
views when its servers hold consecutive envs in one slot, else copies into arrays this driver
owns (same validity rule as lockstep).

The failure policy (``failure.py``) says what a failed server's step becomes; with
``on_env_failure="restart"`` it is made by the agent (``recovery.StandIn``) and handed out like any
other server's: see the module docstring of ``recovery.py``.
"""

from __future__ import annotations

import time
from typing import Any, Optional, Sequence, Union

import numpy as np
from gymnasium.error import AlreadyPendingCallError, NoAsyncCallError

from ...errors import EnvError, PortalTimeoutError, ServerProtocolError
from ...wire import protocol, trees
from ...wire.doorbell import AnyDone
from ...wire.layout import EXTRA, STATUS, STATUS_ERROR, STATUS_OK
from ..contract.infos import add_info
from ..contract.kept_views import KeptViews, anchored, holders
from ..contract.pending import AsyncState
from ..contract.validate import check_blobs
from .batches import ServerQueue
from .health import Health
from .recovery import RESTARTABLE, Recovery, StandIn
from .replies import collect, send_all
from .ring_views import RingViews
from .session import ServerLink

_MAX_PLANS = 4096  # batch plans kept: one per set of servers seen together, few in practice

Batch = tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]
#: A server of a batch and the rows of the batch's ``env_ids`` that hold its envs.
ServerRows = tuple[ServerLink, Union[slice, np.ndarray]]


class BatchPlan:
    """A set of servers handed out together: their envs (``ids``, ``env_id``), each server's rows
    in the batch, and the ring span they cover when their envs are consecutive (else None)."""

    def __init__(self, servers: list[ServerLink]) -> None:
        self.ids = np.array([i for server in servers for i in server.env_indices], dtype=np.int64)
        # Read-only, so one array serves every batch of this plan, and ``send`` may take the
        # very array ``recv`` handed out for the envs it names without comparing them.
        self.env_id = self.ids.astype(np.int32)
        self.env_mask = np.ones(self.ids.size, dtype=np.bool_)
        self.ids.flags.writeable = self.env_id.flags.writeable = self.env_mask.flags.writeable = False
        self.rows: list[tuple[ServerLink, slice]] = []
        row = 0
        for server in servers:
            self.rows.append((server, slice(row, row + len(server.env_indices))))
            row += len(server.env_indices)
        first, last = int(self.ids[0]), int(self.ids[-1]) + 1
        self.span = slice(first, last) if last - first == self.ids.size else None


class RingBatches:
    """Hands out the first ``batch_size`` envs to finish and steps the ones it is sent."""

    def __init__(
        self,
        servers: list[ServerLink],
        ring: RingViews,
        recovery: Recovery,
        health: Health,
        batch_size: int,
        *,
        copy: bool,
        spin_wait: float,
    ) -> None:
        self.servers = servers
        self.ring = ring
        self.recovery = recovery
        self.health = health
        self.batch_size = batch_size
        self.copy = copy
        self.num_envs = ring.num_envs
        self.ring_depth = ring.ring_depth
        self.step_timeout = recovery.step_timeout
        # (the wait's default timeout, each server's from its send): the policy's to say
        self._wait_timeout, self._server_timeout = recovery.timeouts(self.step_timeout)
        self.server_size = len(servers[0].env_indices)
        actions = ring.actions
        assert actions is not None  # VectorPortal makes async batches only for fixed-layout action spaces
        self._actions = actions
        self.queue = ServerQueue(len(servers), ring.mailbox, AnyDone(lambda: [s.done for s in servers]), spin_wait)
        self._server_slot = [0] * len(servers)
        self._stash: dict[int, dict[str, Any]] = {}
        self._stand_ins: dict[int, StandIn] = {}  # ready servers whose result the agent made
        self._reset_extras: dict[int, bytes] = {}
        self._last_ids = np.arange(0)
        self._last_servers: Sequence[ServerRows] = []
        self._last_env_id: Any = None  # the infos["env_id"] handed out with them
        self._plans: dict[tuple[int, ...], BatchPlan] = {}
        self._out_slot = -1
        self._out: dict[tuple[Any, int], np.ndarray] = {}
        # copy=False: the views a batch of consecutive envs hands out, made once per (slot, span)
        # and watched (``kept_views``) until a server of the span writes that slot again.
        self._views: dict[tuple[int, int, int], dict[Any, np.ndarray]] = {}
        self._view_spans: dict[int, list[tuple[int, int, int]]] = {}
        self.kept = KeptViews("ring slot", f"ring_depth - 1 = {self.ring_depth - 1} further batches")

    def send(self, actions: Any, env_ids: Any = None) -> None:
        """Step the envs ``env_ids`` (default: those the last ``recv`` returned) with ``actions``."""
        if (
            env_ids is None
            or env_ids is self._last_env_id
            or env_ids is self._last_ids
            or np.array_equal(env_ids, self._last_ids)
        ):
            ids, servers = self._last_ids, self._last_servers
            if not servers:
                raise ValueError("send() got no env_ids, and there is no batch from recv() to answer")
            self._check_servers_idle(servers)
        else:
            ids = np.asarray(env_ids, dtype=np.int64).reshape(-1)
            servers = self._servers_of(ids)
        arrays = self._actions.arrays(actions, len(ids))
        for server, rows in servers:
            k = (self._server_slot[server.index] + 1) % self.ring_depth
            self.ring.write_env_actions(k, server.rows, arrays, rows)
        recovery = self.recovery
        for server, _ in servers:
            k = self._server_slot[server.index] = (self._server_slot[server.index] + 1) % self.ring_depth
            if not self.copy:
                self._check_kept(server, k)
            if self._reset_extras:
                self._reset_extras = {i: b for i, b in self._reset_extras.items() if i not in server.env_indices}
            if recovery.ended or recovery.replays:
                stand_in = recovery.stand_in(server, k)
                if stand_in is not None:  # a restarted server's envs end or replay their reset
                    self._stand_ins[server.index] = stand_in
                    self.queue.finished(server.index)
                    continue
            self.queue.started(server.index)
            server.post(protocol.CMD_STEP, k)

    def _servers_of(self, ids: np.ndarray) -> list[ServerRows]:
        """(server, rows of ``ids`` holding its envs) for each server ``ids`` covers; checks them."""
        if ids.size == 0:
            raise ValueError("send() got no env_ids, and there is no batch from recv() to answer")
        if ids.min() < 0 or ids.max() >= self.num_envs or len(np.unique(ids)) != ids.size:
            raise ValueError(f"env_ids must be distinct env indices in [0, {self.num_envs}), got {ids.tolist()}")
        size = self.server_size
        positions = np.full(self.num_envs, -1)
        positions[ids] = np.arange(ids.size)
        out: list[ServerRows] = []
        for index in np.unique(ids // size).tolist():
            server = self.servers[index]
            rows = positions[server.rows]
            if (rows < 0).any():
                raise ValueError(
                    f"env_ids {ids.tolist()} cover only part of env server {index} (envs {server.env_indices}): "
                    f"async batches step whole servers of {size} envs, as recv() returns them"
                )
            step = rows[0] + np.arange(size)
            out.append((server, slice(rows[0], rows[0] + size) if np.array_equal(rows, step) else rows))
        self._check_servers_idle(out)
        return out

    def _check_servers_idle(self, servers: Sequence[ServerRows]) -> None:
        idle = self.queue.idle
        for server, _ in servers:
            if server.index not in idle:
                raise AlreadyPendingCallError(
                    f"envs {server.env_indices} are already stepping or have results waiting: call recv() first",
                    "step",
                )

    def ready(self) -> bool:
        """Whether ``recv`` would return at once: enough servers finished for a batch."""
        queue = self.queue
        queue.collect()
        return len(queue.ready) >= self.batch_size // self.server_size

    def recv(self, timeout: Optional[float]) -> Batch:
        """The first ``batch_size`` envs to finish: ``(obs, reward, terminated, truncated, infos)``."""
        queue = self.queue
        wanted = self.batch_size // self.server_size
        if len(queue.ready) + len(queue.pending) < wanted:
            raise NoAsyncCallError(
                f"recv() needs {self.batch_size} envs stepping or finished; send(actions, env_ids) the envs "
                "the last recv() returned (or reset()) first",
                AsyncState.WAITING_STEP.value,
            )
        queue.wait(wanted, self._deadline(timeout), self._check_server, self._timeout_error)
        taken = sorted(queue.take(wanted))
        extras = dict(self._reset_extras)
        errors: list[EnvError] = []
        for index in taken:
            extras.update(self._step_extras(index, errors))
        if errors:
            self.health.raise_env_errors(errors)
        return self._batch(taken, extras)

    def _deadline(self, timeout: Optional[float]) -> Optional[float]:
        """When waiting for servers gives up: after ``timeout``, by default ``step_timeout``.

        With the restart policy only an explicit ``timeout`` applies: a server past
        ``step_timeout`` since its own ``send`` is restarted instead (``_check_server``).
        """
        if timeout is None:
            timeout = self._wait_timeout
        return None if timeout is None else time.monotonic() + timeout

    def _step_extras(self, index: int, errors: list[EnvError]) -> dict[int, bytes]:
        """The infos blobs of a taken server's step; its env errors go to ``errors``.

        With the restart policy an env error or a broken message restarts the server instead,
        and its envs' episodes end in this batch.
        """
        stand_in = self._stand_ins.get(index)
        if stand_in is not None:
            return stand_in.extras
        server = self.servers[index]
        try:
            message = self._stash.pop(index, None) or self._step_message(index)
            if message is None:
                return {}
            if message["cmd"] != protocol.ERROR:
                return check_blobs(message.get("blobs"), server.env_indices, server.describe())
            errors.extend(self.recovery.step_errors(server.errors(message)))
            return {}
        except RESTARTABLE as exc:
            if not self.recovery.handles(exc):
                raise
            return self._end_failed(index, exc).extras

    def _step_message(self, index: int) -> Optional[dict[str, Any]]:
        """The ERROR or EXTRA message a finished server sent with its step, if any."""
        row = self.ring.mailbox[index]
        if row[STATUS] != STATUS_ERROR and not row[EXTRA]:
            return None
        server = self.servers[index]
        message = server.recv(self.step_timeout, "step")
        if message["cmd"] == protocol.ERROR or (
            message["cmd"] == protocol.EXTRA and isinstance(message.get("blobs"), dict)
        ):
            return message
        raise ServerProtocolError(f"env server {index} sent {message['cmd']!r} during a step")

    def _check_server(self, index: int) -> None:
        """Raise if a stepping server died; with the restart policy restart it instead, also
        when it overran ``step_timeout``: its failed step then waits in ``ready``."""
        server = self.servers[index]
        try:
            server.check_alive()
            limit = self._server_timeout
            if limit is not None and time.monotonic() - self.queue.sent_at[index] > limit:
                raise PortalTimeoutError(
                    f"{server.describe()} did not finish its step within {limit} s (step_timeout): hung or too slow"
                )
        except RESTARTABLE as exc:
            if not self.recovery.handles(exc):
                raise
            self.queue.stopped(index)
            self._end_failed(index, exc)

    def _end_failed(self, index: int, cause: BaseException) -> StandIn:
        """Restart a server whose step failed; its envs' episodes end in that step's slot."""
        server = self.servers[index]
        self._stand_ins[index] = self.recovery.end_batched(server, self._server_slot[index], cause)
        return self._stand_ins[index]

    def _timeout_error(self, pending: list[int]) -> PortalTimeoutError:
        envs = [i for index in pending for i in self.servers[index].env_indices]
        return PortalTimeoutError(
            f"no env server finished its step in time; still stepping: servers {pending} (envs {envs}) "
            f"[runtime: {self.servers[pending[0]].runtime()}]"
        )

    def _plan(self, taken: list[int]) -> "BatchPlan":
        """What a batch of these servers always is (its envs, their rows, each server's place)."""
        key = tuple(taken)
        plan = self._plans.get(key)
        if plan is None:
            plan = BatchPlan([self.servers[index] for index in taken])
            if len(self._plans) < _MAX_PLANS:
                self._plans[key] = plan
        return plan

    def _batch(self, taken: list[int], extras: dict[int, bytes]) -> Batch:
        plan = self._plan(taken)
        ids = plan.ids
        slots = [self._server_slot[index] for index in taken]
        infos: dict[str, Any] = {}
        for (server, rows), k in zip(plan.rows, slots):
            infos = self._gather_server(server, k, extras, infos, rows.start)
        infos["env_id"], infos["_env_id"] = plan.env_id, plan.env_mask
        self._last_ids, self._last_servers, self._last_env_id = ids, plan.rows, plan.env_id
        var = None if self.ring.all_fixed else [self.ring.var_obs[i] for i in ids.tolist()]
        same_slot = slots.count(slots[0]) == len(slots)
        if plan.span is not None and same_slot:
            views = self._span_views(slots[0], plan.span)

            def pick(index: Any, array: np.ndarray) -> np.ndarray:
                return views[index]
        else:
            self._out_slot = (self._out_slot + 1) % self.ring_depth

            def pick(index: Any, array: np.ndarray) -> np.ndarray:
                key = (index, self._out_slot)
                if key not in self._out:
                    self._out[key] = np.empty((ids.size,) + array.shape[2:], array.dtype)
                    self.kept.watch(key, holders([self._out[key]]))
                    self.kept.settle(key)
                elif not self.copy:
                    self.kept.check(key)
                out = self._out[key]
                if same_slot:
                    np.take(array[slots[0]], ids, axis=0, out=out)
                    return out
                for (server, rows), k in zip(plan.rows, slots):
                    out[rows] = array[k, server.rows]
                return out

        obs = self.ring.build(pick, var)
        reward, terminated, truncated = (
            pick(name, array)
            for name, array in (
                ("reward", self.ring.reward),
                ("terminated", self.ring.terminated),
                ("truncated", self.ring.truncated),
            )
        )
        if self.copy:
            obs = self.ring.copies.tree(obs, "batch")
            reward, terminated, truncated = (trees.copy_tree(value) for value in (reward, terminated, truncated))
        return obs, reward, terminated, truncated, infos

    def _span_views(self, k: int, span: slice) -> dict[Any, np.ndarray]:
        """The views of envs ``span`` in slot ``k``: every observation leaf and the flags, made the
        first time and watched from then on (their counts taken while only this driver holds them)."""
        key = (k, span.start, span.stop)
        views = self._views.get(key)
        if views is None:
            arrays: dict[Any, np.ndarray] = {**self.ring.obs_by_index, "reward": self.ring.reward}
            arrays.update(terminated=self.ring.terminated, truncated=self.ring.truncated)
            self._views[key] = {name: anchored(array[k, span]) for name, array in arrays.items()}
            self._view_spans.setdefault(k, []).append(key)
            self.kept.watch(key, holders(list(self._views[key].values())))
            self.kept.settle(key)
            views = self._views[key]
        return views

    def _check_kept(self, server: ServerLink, k: int) -> None:
        """Before ``server`` writes slot ``k`` again: report a view of its rows still held."""
        first, last = server.env_indices[0], server.env_indices[-1] + 1
        for key in self._view_spans.get(k, ()):
            if key[1] < last and first < key[2]:
                self.kept.check(key)

    def _gather_server(
        self, server: ServerLink, k: int, extras: dict[int, bytes], infos: dict[str, Any], position: int
    ) -> dict[str, Any]:
        """Decode one server's infos into the batch at ``position``, with those of a restart.

        With the restart policy, infos that cannot be decoded restart the server, as in lockstep.
        """
        try:
            infos = self.ring.gather(k, extras, infos, server.env_indices, position, self.batch_size)
        except ServerProtocolError as exc:
            if server.index in self._stand_ins or not self.recovery.handles(exc):
                raise
            extras.update(self._end_failed(server.index, exc).extras)
            infos = self.ring.gather(k, extras, infos, server.env_indices, position, self.batch_size)
        stand_in = self._stand_ins.pop(server.index, None)
        if stand_in is not None:
            for j, i in enumerate(server.env_indices):
                if i in stand_in.infos:
                    infos = add_info(infos, stand_in.infos[i], position + j, self.batch_size)
            if any(info.get("env_restarted") for info in stand_in.infos.values()):
                self.recovery.shown(server.index, "batch")
        return infos

    def settle(self) -> None:
        """Let every stepping server finish (their results stay waiting) before a control message."""
        queue = self.queue
        queue.wait(len(self.servers), self._deadline(None), self._check_server, self._timeout_error)
        for index in queue.ready:
            if index in self._stash or index in self._stand_ins:
                continue
            try:
                message = self._step_message(index)
            except ServerProtocolError as exc:
                if not self.recovery.handles(exc):
                    raise
                self._end_failed(index, exc)
                continue
            if message is not None:
                self._stash[index] = message

    def reset(self, seeds: list[Optional[int]], options: Optional[dict[str, Any]]) -> None:
        """Reset every env (waiting for steps in flight first); recv() then hands them out."""
        self.settle()
        self._stash.clear()
        self._stand_ins.clear()
        self.recovery.note_reset(seeds, None)
        messages: list[dict[str, Any]] = []
        for server in self.servers:
            k = self._server_slot[server.index] = (self._server_slot[server.index] + 1) % self.ring_depth
            if not self.copy:
                self._check_kept(server, k)
            messages.append(
                {
                    "cmd": protocol.RESET,
                    "slot": k,
                    "prev_slot": k,
                    "options": options,
                    "mask": None,
                    "seeds": [seeds[i] for i in server.env_indices],
                }
            )
        for message in messages:
            protocol.packb(message)  # raises TypeError naming an unsendable value before any server is told
        sent, failed = send_all(self.servers, messages, self.recovery)
        extras, _, errors, failed_replies = collect(sent, "reset", self.step_timeout, self.recovery)
        failed.update(failed_replies)
        # -- recovery: restart failed servers and repeat the reset for their envs --
        for server, cause in failed.items():
            extras.update(self.recovery.retry_reset(server, messages[server.index], cause))
        for index, restarted in self.recovery.reset_infos().items():  # shown with the envs' first batch
            self._stand_ins[index] = StandIn({}, restarted)
        if errors:
            self.health.raise_env_errors(errors)
        self._reset_extras = extras
        self.ring.mailbox[:, STATUS] = STATUS_OK
        self.ring.mailbox[:, EXTRA] = 0
        self.queue.reset_all_ready([server.index for server in self.servers])
