"""The API of async batches (envpool style) on a VectorPortal: ``send``, ``recv``, ``async_reset``.

A mixin of ``VectorPortal``: it works on the portal's ring views, servers and infos decoding, and
adds only what batches need (which servers are stepping, ready or idle lives in ``batches.py``).
A batch is a set of whole servers; ``recv`` returns ring views when its servers hold consecutive
envs in one slot, else copies into arrays the portal owns (same validity rule as lockstep).

With ``on_env_failure="restart"`` a failed server's step is made by the agent (``recovery.StandIn``)
and handed out like any other server's: see the module docstring of ``recovery.py``.
"""

from __future__ import annotations

import os
import time
from typing import Any, Optional

import numpy as np
from gymnasium.error import AlreadyPendingCallError, NoAsyncCallError

from ..errors import PortalError, PortalTimeoutError, ServerProtocolError
from ..wire import protocol as P
from ..wire.doorbell import AnyDone
from ..wire.layout import EXTRA, STATUS, STATUS_ERROR, STATUS_OK
from .batches import ServerQueue, default_envs_per_server, server_sizes_error
from .infos import add_info
from .pending import AsyncState
from .recovery import RESTARTABLE, StandIn
from .session import group_envs
from .validate import check_blobs

_MAX_PLANS = 4096  # batch plans kept: one per set of servers seen together, few in practice


class BatchPlan:
    """A set of servers handed out together: their envs (``ids``, ``env_id``), each server's rows
    in the batch, and the ring span they cover when their envs are consecutive (else None)."""

    def __init__(self, servers: list) -> None:
        self.ids = np.array([i for server in servers for i in server.env_indices], dtype=np.int64)
        # Read-only, so one array serves every batch of this plan, and ``send`` may take the
        # very array ``recv`` handed out for the envs it names without comparing them.
        self.env_id = self.ids.astype(np.int32)
        self.env_mask = np.ones(self.ids.size, dtype=np.bool_)
        self.ids.flags.writeable = self.env_id.flags.writeable = self.env_mask.flags.writeable = False
        self.rows: list[tuple] = []
        row = 0
        for server in servers:
            self.rows.append((server, slice(row, row + len(server.env_indices))))
            row += len(server.env_indices)
        first, last = int(self.ids[0]), int(self.ids[-1]) + 1
        self.span = slice(first, last) if last - first == self.ids.size else None


class AsyncBatches:
    """``send``/``recv``/``async_reset`` for a ``VectorPortal`` created with ``batch_size < num_envs``."""

    def _async_grouping(self, specs: list, envs_per_server: Optional[int]) -> int:
        if not 1 <= self.batch_size <= self.num_envs:
            raise ValueError(f"batch_size must be between 1 and num_envs={self.num_envs}, got {self.batch_size}")
        if envs_per_server is None:
            envs_per_server = default_envs_per_server(self.num_envs, self.batch_size, os.cpu_count() or 1)
        sizes = [len(group) for group in group_envs(specs, envs_per_server)]
        problem = server_sizes_error(sizes, self.batch_size, self.num_envs)
        if problem:
            raise ValueError(problem)
        return envs_per_server

    def _start_batches(self) -> None:
        if self._act_leaves is None:
            raise ValueError(
                f"batch_size needs an action space with a fixed layout, not {self.single_action_space}: "
                "async batches write actions into the ring"
            )
        servers = self._session.servers
        self._server_size = len(servers[0].env_indices)
        self._queue = ServerQueue(
            len(servers), self._mailbox, AnyDone(lambda: [s.done for s in servers]), self.spin_wait
        )
        self._server_slot = [0] * len(servers)
        self._stash: dict = {}
        self._stand_ins: dict[int, StandIn] = {}  # ready servers whose result the agent made
        self._reset_extras: dict = {}
        self._last_ids = np.arange(0)
        self._last_servers: list = []
        self._last_env_id: Any = None  # the infos["env_id"] handed out with them
        self._plans: dict[tuple, BatchPlan] = {}
        self._out_slot = -1
        self._out: dict = {}

    def _require_batches(self, what: str) -> None:
        self._check_usable()
        if not self._async:
            raise PortalError(
                f"{what}() is for async batches: create the VectorPortal with batch_size < num_envs "
                f"(vector_kwargs={{'batch_size': B}}); use step() for lockstep stepping"
            )

    def send(self, actions: Any, env_ids: Any = None) -> None:
        """Step the envs ``env_ids`` (default: those the last ``recv`` returned) with ``actions``.

        ``actions`` is batched along ``env_ids``; the envs must form whole servers that are not
        already stepping (the envs ``recv`` hands out always do). Returns at once.
        """
        self._require_batches("send")
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
        try:
            for leaf, value in zip(self._act_leaves, self._action_values(actions, len(ids))):
                for server, rows in servers:
                    k = (self._server_slot[server.index] + 1) % self.ring_depth
                    first, last = server.env_indices[0], server.env_indices[-1] + 1
                    np.copyto(leaf[k, first:last], value[rows], casting="unsafe")
            recovery = self._recovery
            for server, _ in servers:
                k = self._server_slot[server.index] = (self._server_slot[server.index] + 1) % self.ring_depth
                if self._reset_extras:
                    self._reset_extras = {i: b for i, b in self._reset_extras.items() if i not in server.env_indices}
                if recovery.ended or recovery.replays:
                    stand_in = recovery.stand_in(server, k)
                    if stand_in is not None:  # a restarted server's envs end or replay their reset
                        self._stand_ins[server.index] = stand_in
                        self._queue.finished(server.index)
                        continue
                self._queue.started(server.index)
                server.post(P.CMD_STEP, k)
        except BaseException as exc:
            self._fail(exc)
            raise

    def async_reset(self, seed: int | list | None = None, options: dict | None = None) -> None:
        """Reset every env (after any steps in flight); ``recv()`` then hands out the reset batches.

        envpool's ``async_reset``: ``reset()`` with async batches is this followed by ``recv()``.
        """
        self._require_batches("async_reset")
        self._pending.check_idle("async_reset")
        self._reset_batches(self._seeds(seed), options)

    def _servers_of(self, ids: np.ndarray) -> list:
        """(server, rows of ``ids`` holding its envs) for each server ``ids`` covers; checks them."""
        if ids.size == 0:
            raise ValueError("send() got no env_ids, and there is no batch from recv() to answer")
        if ids.min() < 0 or ids.max() >= self.num_envs or len(np.unique(ids)) != ids.size:
            raise ValueError(f"env_ids must be distinct env indices in [0, {self.num_envs}), got {ids.tolist()}")
        size = self._server_size
        positions = np.full(self.num_envs, -1)
        positions[ids] = np.arange(ids.size)
        out = []
        for index in np.unique(ids // size).tolist():
            server = self._session.servers[index]
            rows = positions[server.env_indices[0] : server.env_indices[-1] + 1]
            if (rows < 0).any():
                raise ValueError(
                    f"env_ids {ids.tolist()} cover only part of env server {index} (envs {server.env_indices}): "
                    f"async batches step whole servers of {size} envs, as recv() returns them"
                )
            step = rows[0] + np.arange(size)
            out.append((server, slice(rows[0], rows[0] + size) if np.array_equal(rows, step) else rows))
        self._check_servers_idle(out)
        return out

    def _check_servers_idle(self, servers: list) -> None:
        idle = self._queue.idle
        for server, _ in servers:
            if server.index not in idle:
                raise AlreadyPendingCallError(
                    f"envs {server.env_indices} are already stepping or have results waiting: call recv() first",
                    "step",
                )

    def _action_values(self, actions: Any, count: int) -> list:
        arrays = [np.asarray(value) for value in self._action_leaves(actions)]
        for array, leaf in zip(arrays, self._act_leaves):
            if array.shape != (count,) + leaf.shape[2:]:
                raise ValueError(
                    f"actions of shape {array.shape} do not match {count} envs of action space "
                    f"{self.single_action_space} (expected shape {(count,) + leaf.shape[2:]})"
                )
        return arrays

    def recv(self, timeout: float | None = None) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict]:
        """The first ``batch_size`` envs to finish: ``(obs, reward, terminated, truncated, infos)``.

        ``infos["env_id"]`` says which envs they are (ascending, read-only). When the finished servers hold
        consecutive envs in the same ring slot (always the case with one server per batch), the
        arrays are views of the ring, as in lockstep; otherwise they are gathered into arrays
        owned by the portal, reused after ``ring_depth`` batches: the same validity rule either
        way (see the module docstring).
        """
        self._require_batches("recv")
        if self._pending.state is AsyncState.WAITING_STEP:
            self._pending.end()
        return self._recv_batch(timeout)

    def batch_ready(self) -> bool:
        """Whether ``recv`` would return at once: enough servers finished for a batch."""
        queue = self._queue
        queue.collect()
        return len(queue.ready) >= self.batch_size // self._server_size

    def _recv_batch(self, timeout: Optional[float]) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict]:
        queue = self._queue
        wanted = self.batch_size // self._server_size
        if len(queue.ready) + len(queue.pending) < wanted:
            raise NoAsyncCallError(
                f"recv() needs {self.batch_size} envs stepping or finished; send(actions, env_ids) the envs "
                "the last recv() returned (or reset()) first",
                AsyncState.WAITING_STEP.value,
            )
        try:
            queue.wait(wanted, self._deadline(timeout), self._check_server, self._timeout_error)
            taken = sorted(queue.take(wanted))
            extras = dict(self._reset_extras)
            errors: list = []
            for index in taken:
                extras.update(self._step_extras(index, errors))
            if errors:
                self._raise_env_errors(errors)
            return self._batch(taken, extras)
        except BaseException as exc:
            self._fail(exc)
            raise

    def _deadline(self, timeout: Optional[float]) -> Optional[float]:
        """When waiting for servers gives up: after ``timeout``, by default ``step_timeout``.

        With the restart policy only an explicit ``timeout`` applies: a server past
        ``step_timeout`` since its own ``send`` is restarted instead (``_check_server``).
        """
        if timeout is None and not self._recovery.enabled:
            timeout = self.step_timeout
        return None if timeout is None else time.monotonic() + timeout

    def _step_extras(self, index: int, errors: list) -> dict:
        """The infos blobs of a taken server's step; its env errors go to ``errors``.

        With the restart policy an env error or a broken message restarts the server instead,
        and its envs' episodes end in this batch.
        """
        stand_in = self._stand_ins.get(index)
        if stand_in is not None:
            return stand_in.extras
        server = self._session.servers[index]
        try:
            message = self._stash.pop(index, None) or self._step_message(index)
            if message is None:
                return {}
            if message["cmd"] != P.ERROR:
                return check_blobs(message.get("blobs"), server.env_indices, server.describe())
            server_errors = server.errors(message)
            if self._recovery.enabled:
                raise server_errors[0]
            errors.extend(server_errors)
            return {}
        except RESTARTABLE as exc:
            if not self._recovery.enabled:
                raise
            return self._end_failed(index, exc).extras

    def _step_message(self, index: int) -> Optional[dict]:
        """The ERROR or EXTRA message a finished server sent with its step, if any."""
        row = self._mailbox[index]
        if row[STATUS] != STATUS_ERROR and not row[EXTRA]:
            return None
        server = self._session.servers[index]
        message = server.recv(self.step_timeout, "step")
        if message["cmd"] == P.ERROR or (message["cmd"] == P.EXTRA and isinstance(message.get("blobs"), dict)):
            return message
        raise ServerProtocolError(f"env server {index} sent {message['cmd']!r} during a step")

    def _check_server(self, index: int) -> None:
        """Raise if a stepping server died; with the restart policy restart it instead, also
        when it overran ``step_timeout``: its failed step then waits in ``ready``."""
        server = self._session.servers[index]
        if not self._recovery.enabled:
            server.check_alive()
            return
        try:
            server.check_alive()
            if self.step_timeout is not None and time.monotonic() - self._queue.sent_at[index] > self.step_timeout:
                raise PortalTimeoutError(
                    f"{server.describe()} did not finish its step within {self.step_timeout} s "
                    "(step_timeout): hung or too slow"
                )
        except RESTARTABLE as exc:
            self._queue.stopped(index)
            self._end_failed(index, exc)

    def _end_failed(self, index: int, cause: BaseException) -> StandIn:
        """Restart a server whose step failed; its envs' episodes end in that step's slot."""
        server = self._session.servers[index]
        self._stand_ins[index] = self._recovery.end_batched(server, self._server_slot[index], cause)
        return self._stand_ins[index]

    def _timeout_error(self, pending: list) -> PortalTimeoutError:
        envs = [i for index in pending for i in self._session.servers[index].env_indices]
        return PortalTimeoutError(
            f"no env server finished its step in time; still stepping: servers {pending} (envs {envs}) "
            f"[runtime: {self._session.servers[pending[0]].handle.describe()}]"
        )

    def _plan(self, taken: list) -> "BatchPlan":
        """What a batch of these servers always is (its envs, their rows, each server's place)."""
        key = tuple(taken)
        plan = self._plans.get(key)
        if plan is None:
            plan = BatchPlan([self._session.servers[index] for index in taken])
            if len(self._plans) < _MAX_PLANS:
                self._plans[key] = plan
        return plan

    def _batch(self, taken: list, extras: dict) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict]:
        plan = self._plan(taken)
        ids = plan.ids
        slots = [self._server_slot[index] for index in taken]
        infos: dict = {}
        for (server, rows), k in zip(plan.rows, slots):
            infos = self._gather_server(server, k, extras, infos, rows.start)
        infos["env_id"], infos["_env_id"] = plan.env_id, plan.env_mask
        self._last_ids, self._last_servers, self._last_env_id = ids, plan.rows, plan.env_id
        var = None if self._obs_slots is not None else [self._var_obs[i] for i in ids.tolist()]
        same_slot = slots.count(slots[0]) == len(slots)
        if plan.span is not None and same_slot:
            k, span = slots[0], plan.span

            def pick(index: Any, array: np.ndarray) -> np.ndarray:
                return array[k, span]
        else:
            self._out_slot = (self._out_slot + 1) % self.ring_depth

            def pick(index: Any, array: np.ndarray) -> np.ndarray:
                key = (index, self._out_slot)
                out = self._out.get(key)
                if out is None:
                    out = self._out[key] = np.empty((ids.size,) + array.shape[2:], array.dtype)
                if same_slot:
                    np.take(array[slots[0]], ids, axis=0, out=out)
                    return out
                for (server, rows), k in zip(plan.rows, slots):
                    out[rows] = array[k, server.env_indices[0] : server.env_indices[-1] + 1]
                return out

        try:
            obs = self._build_obs(pick, var)
        except (KeyError, TypeError, IndexError) as exc:
            raise ServerProtocolError(f"an env sent an incomplete variable-layout observation: {exc}") from None
        reward, terminated, truncated = (
            pick(name, array)
            for name, array in (
                ("reward", self._reward),
                ("terminated", self._terminated),
                ("truncated", self._truncated),
            )
        )
        if self.copy:
            obs, reward, terminated, truncated = (
                self._copy_tree(value) for value in (obs, reward, terminated, truncated)
            )
        return obs, reward, terminated, truncated, infos

    def _gather_server(self, server: Any, k: int, extras: dict, infos: dict, position: int) -> dict:
        """Decode one server's infos into the batch at ``position``, with those of a restart.

        With the restart policy, infos that cannot be decoded restart the server, as in lockstep.
        """
        try:
            infos = self._gather(k, extras, infos, server.env_indices, position, self.batch_size)
        except ServerProtocolError as exc:
            if not self._recovery.enabled or server.index in self._stand_ins:
                raise
            extras.update(self._end_failed(server.index, exc).extras)
            infos = self._gather(k, extras, infos, server.env_indices, position, self.batch_size)
        stand_in = self._stand_ins.pop(server.index, None)
        if stand_in is not None:
            for j, i in enumerate(server.env_indices):
                if i in stand_in.infos:
                    infos = add_info(infos, stand_in.infos[i], position + j, self.batch_size)
        return infos

    def _settle(self) -> None:
        """Let every stepping server finish (their results stay waiting) before a control message."""
        queue = self._queue
        queue.wait(len(self._session.servers), self._deadline(None), self._check_server, self._timeout_error)
        for index in queue.ready:
            if index in self._stash or index in self._stand_ins:
                continue
            try:
                message = self._step_message(index)
            except ServerProtocolError as exc:
                if not self._recovery.enabled:
                    raise
                self._end_failed(index, exc)
                continue
            if message is not None:
                self._stash[index] = message

    def _reset_batches(self, seeds: list, options: Optional[dict]) -> None:
        """Reset every env (waiting for steps in flight first); recv() then hands them out."""
        try:
            self._settle()
            self._stash.clear()
            self._stand_ins.clear()
            self._recovery.note_reset(seeds, None)
            messages = []
            for server in self._session.servers:
                k = self._server_slot[server.index] = (self._server_slot[server.index] + 1) % self.ring_depth
                messages.append(
                    {
                        "cmd": P.RESET,
                        "slot": k,
                        "prev_slot": k,
                        "options": options,
                        "mask": None,
                        "seeds": [seeds[i] for i in server.env_indices],
                    }
                )
            sent, failed = self._send_all(messages)
            extras, errors, failed_replies = self._replies("reset", None, sent)
            failed.update(failed_replies)
            # -- recovery: restart failed servers and repeat the reset for their envs --
            for server, cause in failed.items():
                extras.update(self._recovery.retry_reset(server, messages[server.index], cause))
                self._stand_ins[server.index] = StandIn({}, {i: {"env_restarted": True} for i in server.env_indices})
            if errors:
                self._raise_env_errors(errors)
            self._reset_extras = extras
            self._mailbox[:, STATUS] = STATUS_OK
            self._mailbox[:, EXTRA] = 0
            self._queue.reset_all_ready([server.index for server in self._session.servers])
        except BaseException as exc:
            self._fail(exc)
            raise
