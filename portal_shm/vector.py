"""VectorPortal: a gymnasium ``VectorEnv`` whose envs live in isolated runtimes.

Data path of one step: the agent writes the actions into ring slot ``k``, writes ``STEP k`` into
each server's mailbox and rings its doorbell; each server steps its envs and writes observations,
rewards, flags and an infos blob into row ``i`` of slot ``k``, then rings back. The observations
returned are numpy views of slot ``k``: no copy, no allocation.

Validity of returned batches (``copy=False``, the default): the arrays returned by ``step`` or
``reset`` are views of one ring slot and stay valid until ``ring_depth - 1`` further calls of
``step``/``reset`` have returned; the next call after that writes the same slot again. Keep them
longer by copying (``np.copy``, ``torch.tensor``, writing them into a rollout buffer) or pass
``copy=True`` to get fresh arrays every step, as gymnasium's SyncVectorEnv does.
"""

from __future__ import annotations

import copy as copy_module
import time
import weakref
from enum import Enum
from typing import Any, Callable, Optional, Sequence

import numpy as np
from gymnasium.error import AlreadyPendingCallError, ClosedEnvironmentError, NoAsyncCallError
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_differing_spaces, batch_space

from . import protocol as P
from .control import POLL_SLICE
from .errors import (EnvError, PortalError, PortalTimeoutError, RestartLimitError, ServerDiedError,
                     ServerProtocolError)
from .infos import add_info
from .layout import MAILBOX_FIELDS, STATUS_ERROR, ring_layout
from .recovery import RESTARTABLE, Recovery, fixed_obs_views
from .schema import is_fixed, leaf_shape_dtype, leaves, schema_to_space
from .session import PortalSession, ServerLink
from .spec import EnvSpec
from .validate import check_blobs, check_reply, decode_infos, space_from_schema

_CMD, _SLOT, _PREV, _STATUS, _EXTRA = (MAILBOX_FIELDS.index(n) for n in ("cmd", "slot", "prev_slot", "status", "extra"))


class AsyncState(Enum):
    DEFAULT = "default"
    WAITING_STEP = "step"


def _layout_of(schema: dict) -> list:
    """What the ring needs of a space: each leaf's kind, shape and dtype, bounds aside."""
    return [(leaf["kind"],) + (tuple(map(str, leaf_shape_dtype(leaf))) if is_fixed(leaf) else ())
            for _, leaf in leaves(schema)]


def _tree_copy(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return value.copy()
    if isinstance(value, dict):
        return {k: _tree_copy(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return tuple(_tree_copy(v) for v in value)
    return copy_module.deepcopy(value)


class VectorPortal(VectorEnv):
    """Steps envs that live in other runtimes as one batched gymnasium ``VectorEnv``.

    Args:
        envs: one ``EnvSpec`` per env (``make_vec`` builds this list for you). Consecutive envs
            with equal specs share env servers, ``envs_per_server`` each.
        autoreset_mode: gymnasium's ``AutoresetMode`` (NEXT_STEP, SAME_STEP or DISABLED).
        copy: return fresh arrays every call instead of ring views (see the module docstring for
            how long views stay valid).
        ring_depth: number of batches the ring holds; a returned view survives ``ring_depth - 1``
            further calls.
        envs_per_server: envs hosted by one server process. Default: spread the envs over as many
            servers as there are CPU cores; one process per core avoids wake-up storms.
        info_capacity: bytes reserved per env and slot for its encoded infos; larger infos (e.g.
            SAME_STEP's ``final_obs``) travel over the control channel instead.
        startup_timeout: seconds to wait for servers to create their envs and connect.
        step_timeout: seconds a step, reset or call may take before ``PortalTimeoutError``;
            None waits as long as the servers live (a dead server is always reported at once).
        observation_mode: ``"same"`` (all envs have equal observation spaces) or ``"different"``
            (one shape and dtype, other bounds, e.g. two versions of an env side by side), as in
            gymnasium's vector envs.
        on_env_failure: ``"raise"`` (default) or ``"restart"``: replace a failed env server by a
            fresh one and end its envs' episodes as truncated with ``info["env_restarted"]``;
            the rules, and the seeds restarted envs get, are in ``portal_shm.recovery``.
        max_restarts: restarts allowed per env over the portal's life with ``"restart"``; the
            next failure raises ``RestartLimitError``.
    """

    def __init__(
        self,
        envs: Sequence[EnvSpec],
        *,
        autoreset_mode: str | AutoresetMode = AutoresetMode.NEXT_STEP,
        copy: bool = False,
        ring_depth: int = 4,
        envs_per_server: Optional[int] = None,
        info_capacity: int = 4096,
        startup_timeout: float = 120.0,
        step_timeout: Optional[float] = None,
        observation_mode: str = "same",
        on_env_failure: str = "raise",
        max_restarts: int = 3,
    ) -> None:
        specs = list(envs)
        if not specs:
            raise ValueError("VectorPortal needs at least one env spec")
        if not all(isinstance(spec, EnvSpec) for spec in specs):
            raise TypeError("VectorPortal(envs) takes a list of portal_shm.EnvSpec; use portal_shm.make_vec(id, n)")
        if observation_mode not in ("same", "different"):
            raise ValueError(f"observation_mode must be 'same' or 'different', got {observation_mode!r}")
        self.observation_mode = observation_mode
        if ring_depth < 2:
            raise ValueError(f"ring_depth must be at least 2, got {ring_depth}")
        self.num_envs = len(specs)
        self.autoreset_mode = autoreset_mode if isinstance(autoreset_mode, AutoresetMode) else AutoresetMode(autoreset_mode)
        self.copy = copy
        self.ring_depth = ring_depth
        self.step_timeout = step_timeout
        self.closed = False
        self._state = AsyncState.DEFAULT
        self._broken: Optional[BaseException] = None
        self._slot = -1
        self._raw_infos = False
        bases = {spec.backend.run_dir_base() for spec in specs}
        if len(bases) > 1:
            raise ValueError(f"these backends need their run directories in different places: {sorted(map(str, bases))}")
        self._session = PortalSession(bases.pop())
        self._finalizer = weakref.finalize(self, self._session.shutdown)
        try:
            self._start(specs, envs_per_server, startup_timeout, info_capacity)
            # -- recovery policy (portal_shm/recovery.py) --
            self._recovery = Recovery(self, on_env_failure, max_restarts, startup_timeout)
        except BaseException:
            self._finalizer()
            self.closed = True
            raise

    # -- start-up ------------------------------------------------------------------------
    def _start(self, specs: list, envs_per_server: Optional[int], timeout: float, info_capacity: int) -> None:
        session = self._session
        session.launch(specs, envs_per_server, timeout)
        obs_schemas = [s for server in session.servers for s in server.schemas("observation_spaces")]
        act_schemas = [s for server in session.servers for s in server.schemas("action_spaces")]
        self._obs_schema, self._act_schema = obs_schemas[0], act_schemas[0]
        self.single_observation_space = space_from_schema(self._obs_schema, "env 0's observation space")
        self.single_action_space = space_from_schema(self._act_schema, "env 0's action space")
        for i, (obs, act) in enumerate(zip(obs_schemas, act_schemas)):
            if self.observation_mode == "different" and _layout_of(obs) != _layout_of(self._obs_schema):
                raise RuntimeError(
                    f"VectorPortal(..., observation_mode='different') needs observation spaces of one shape and "
                    f"dtype; env {i} has {schema_to_space(obs)}, env 0 has {self.single_observation_space}"
                )
            if self.observation_mode == "same" and P.packb(obs) != P.packb(self._obs_schema):
                raise RuntimeError(
                    f"env {i} has observation space {schema_to_space(obs)}, env 0 has "
                    f"{self.single_observation_space}: all envs of a VectorPortal need the same spaces, "
                    "or pass observation_mode='different' for spaces of one shape and dtype with other bounds"
                )
            if P.packb(act) != P.packb(self._act_schema):
                raise RuntimeError(
                    f"env {i} has action space {schema_to_space(act)}, env 0 has {self.single_action_space}"
                )
        if not is_fixed(self._act_schema):
            raise ValueError(f"action space {self.single_action_space} has no fixed layout; it cannot live in the ring")
        if self.observation_mode == "different":
            self.observation_space = batch_differing_spaces([schema_to_space(obs) for obs in obs_schemas])
        else:
            self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        first = session.servers[0].hello
        self.metadata = dict(first.get("metadata") or {})
        self.metadata["autoreset_mode"] = self.autoreset_mode
        self.render_mode = first.get("render_mode")

        layout = ring_layout(self._obs_schema, self._act_schema, self.num_envs, self.ring_depth,
                             len(session.servers), info_capacity)
        ring = session.attach(layout, {"autoreset_mode": self.autoreset_mode.value,
                                       "observation_schema": self._obs_schema,
                                       "action_schema": self._act_schema}, timeout)
        views = ring.views
        self._mailbox = views["mailbox"]
        self._reward, self._terminated, self._truncated = views["reward"], views["terminated"], views["truncated"]
        self._info_len, self._info = views["info_len"], views["info"]
        self._info_capacity = info_capacity
        self._act_leaves = [views[f"act.{j}"] for j in range(len(leaves(self._act_schema)))]
        self._obs_views, self._obs_fixed_views = fixed_obs_views(self._obs_schema, views)
        self._build_obs = self._obs_builder(self._obs_schema, views, [0])
        has_variable_leaves = not all(is_fixed(leaf) for _, leaf in leaves(self._obs_schema))
        self._obs_slots = None if has_variable_leaves else [self._build_obs(k, None) for k in range(self.ring_depth)]
        self._var_obs: list = [None] * self.num_envs
        self._results_views = [(self._reward[k], self._terminated[k], self._truncated[k]) for k in range(self.ring_depth)]

    def _obs_builder(self, schema: dict, views: dict, counter: list) -> Callable[[int, Optional[list]], Any]:
        kind = schema["kind"]
        if kind == "Dict":
            parts = [(key, self._obs_builder(sub, views, counter)) for key, sub in schema["spaces"]]
            return lambda k, var: {key: build(k, var) for key, build in parts}
        if kind == "Tuple":
            items = [self._obs_builder(sub, views, counter) for sub in schema["spaces"]]
            return lambda k, var: tuple(build(k, var) for build in items)
        index = counter[0]
        counter[0] += 1
        if is_fixed(schema):
            array = views[f"obs.{index}"]
            return lambda k, var: array[k]
        return lambda k, var: tuple(env_var[index] for env_var in var)

    # -- waiting on servers --------------------------------------------------------------
    def _wait_done(self, server: ServerLink, deadline: Optional[float]) -> None:
        done = server.done
        if done.wait(POLL_SLICE):
            return
        while True:
            server.check_alive()
            if deadline is not None and time.monotonic() > deadline:
                raise PortalTimeoutError(f"{server.describe()} did not finish its step within "
                                         f"{self.step_timeout} s (step_timeout): hung or too slow")
            if done.wait(POLL_SLICE):
                return

    def _check_usable(self) -> None:
        if self.closed:
            raise ClosedEnvironmentError("this VectorPortal is closed")
        if self._broken is not None:
            raise PortalError(f"this VectorPortal cannot continue after an earlier failure: {self._broken}")

    def _fail(self, exc: BaseException) -> None:
        if isinstance(exc, (ServerDiedError, PortalTimeoutError, ServerProtocolError, RestartLimitError,
                            KeyboardInterrupt)):
            self._broken = exc
            self._session.graceful = False

    def _next_slot(self) -> tuple[int, int]:
        prev = self._slot
        self._slot = (self._slot + 1) % self.ring_depth
        return self._slot, max(prev, 0)

    # -- infos and observations ----------------------------------------------------------
    def _gather(self, k: int, extras: dict, infos: dict, envs: Optional[list] = None) -> dict:
        """Decode and batch the infos of ``envs`` (all by default), in env order, into ``infos``."""
        lengths = self._info_len[k].tolist()
        for i in range(self.num_envs) if envs is None else envs:
            length = lengths[i]
            if length == 0:
                continue
            if length == -1 and i in extras:
                blob = extras[i]
            elif 0 < length <= self._info_capacity:
                blob = self._info[k, i, :length].tobytes()
            else:
                raise ServerProtocolError(f"env {i} wrote an invalid infos length {length}")
            env_infos, var_obs = decode_infos(blob, i)
            for env_info in env_infos:
                if env_info:
                    try:
                        infos = {**infos, **env_info} if self._raw_infos else add_info(infos, env_info, i, self.num_envs)
                    except Exception as exc:
                        raise ServerProtocolError(f"env {i}'s infos cannot be batched with the others': {exc}") from None
            if var_obs is not None:
                self._var_obs[i] = var_obs
        return infos

    def _observations(self, k: int) -> Any:
        if self._obs_slots is not None:
            obs = self._obs_slots[k]
        else:
            try:
                obs = self._build_obs(k, self._var_obs)
            except (KeyError, TypeError, IndexError) as exc:
                raise ServerProtocolError(f"an env sent an incomplete variable-layout observation: {exc}") from None
        return _tree_copy(obs) if self.copy else obs

    # -- the gymnasium API ---------------------------------------------------------------
    def reset(self, *, seed: int | list | None = None, options: dict | None = None) -> tuple[Any, dict]:
        """Reset all envs (or those in ``options["reset_mask"]``) exactly as SyncVectorEnv does."""
        self._check_usable()
        if self._state is not AsyncState.DEFAULT:
            raise AlreadyPendingCallError(
                f"calling `reset` while waiting for a pending call to `{self._state.value}` to complete",
                str(self._state.value),
            )
        if seed is None:
            seeds = [None] * self.num_envs
        elif isinstance(seed, (int, np.integer)):
            seeds = [int(seed) + i for i in range(self.num_envs)]
        else:
            seeds = list(seed)
        if len(seeds) != self.num_envs:
            raise ValueError(
                f"If seeds are passed as a list the length must match num_envs={self.num_envs} but got length={len(seeds)}."
            )
        mask = None
        if options is not None and "reset_mask" in options:
            mask = options.pop("reset_mask")
            if not isinstance(mask, np.ndarray):
                raise TypeError(f"`options['reset_mask']` must be a numpy array, got {type(mask)}")
            if mask.shape != (self.num_envs,):
                raise ValueError(f"`options['reset_mask']` must have shape `({self.num_envs},)`, got {mask.shape}")
            if mask.dtype != np.bool_:
                raise TypeError(f"`options['reset_mask']` must have `dtype=np.bool_`, got {mask.dtype}")
            if not np.any(mask):
                raise ValueError(
                    f"`options['reset_mask']` must contain a boolean array with at least one True value, got reset_mask={mask}"
                )
        k, prev = self._next_slot()
        servers = self._session.servers
        self._recovery.note_reset(seeds, mask)
        messages = [{
            "cmd": P.RESET,
            "slot": k,
            "prev_slot": prev,
            "seeds": [seeds[i] for i in server.env_indices],
            "options": options,
            "mask": None if mask is None else [bool(mask[i]) for i in server.env_indices],
        } for server in servers]
        try:
            sent, failed = self._send_all(messages)
            extras, error, more_failed = self._replies("reset", sent)
            failed.update(more_failed)
            # -- recovery: restart failed servers and repeat the reset for their envs --
            restarted = []
            for server, cause in failed.items():
                extras.update(self._recovery.retry_reset(server, messages[server.index], cause))
                restarted.extend(server.env_indices)
            if error is not None:
                raise error
            infos = self._gather(k, extras, {})
            for i in restarted:
                infos = add_info(infos, {"env_restarted": True}, i, self.num_envs)
        except BaseException as exc:
            self._fail(exc)
            raise
        return self._observations(k), infos

    def _send_all(self, messages: list) -> tuple[list, dict]:
        """Send each server its control message; (servers reached, failed server -> exception)."""
        sent, failed = [], {}
        for server, message in zip(self._session.servers, messages):
            try:
                server.channel.send(message, server.check_alive)
                self._mailbox[server.index, _CMD] = P.CMD_CONTROL
                server.go.ring()
                sent.append(server)
            except RESTARTABLE as exc:
                if not self._recovery.enabled:
                    raise
                failed[server] = exc
        return sent, failed

    def _replies(self, what: str, servers: Optional[list] = None) -> tuple[dict, Optional[EnvError], dict]:
        """Collect one reply per server (always all of them, to stay in step); first error wins.

        With ``on_env_failure="restart"`` a failed server does not stop the collection: it is
        returned in the third item (server -> exception) for the caller to recover. A reset
        counts an env's exception as a failure, other calls only a broken server.
        """
        extras: dict = {}
        results: list = []
        error = None
        failed: dict = {}
        restart = self._recovery.enabled
        for server in self._session.servers if servers is None else servers:
            try:
                message = server.recv(self.step_timeout, what)
                if message["cmd"] == P.ERROR:
                    exc = server.error(message)
                    if restart and what == "reset":
                        raise exc
                    error = error or exc
                elif message["cmd"] == P.REPLY:
                    server_extras, server_results = check_reply(message, server.env_indices, server.describe())
                    extras.update(server_extras)
                    results.extend(server_results)
                else:
                    raise ServerProtocolError(f"{server.describe()} answered {what} with {message['cmd']!r:.40}")
            except RESTARTABLE as exc:
                if not restart:
                    raise
                failed[server] = exc
        self._results = results
        return extras, error, failed

    def step_async(self, actions: Any) -> None:
        """Write the actions into the ring and wake every server; returns at once."""
        self._check_usable()
        if self._state is not AsyncState.DEFAULT:
            raise AlreadyPendingCallError(
                f"Calling `step_async` while waiting for a pending call to `{self._state.value}` to complete.",
                str(self._state.value),
            )
        k, _ = self._next_slot()
        self._write_actions(k, actions)
        mailbox = self._mailbox
        recovery = self._recovery
        for server in self._session.servers:
            if (recovery.resetting or recovery.ended) and recovery.begin_step(server, k):
                continue  # a restarted server's envs: reset instead of step, or end the episode
            mailbox[server.index, _CMD] = P.CMD_STEP
            mailbox[server.index, _SLOT] = k
            server.go.ring()
        self._state = AsyncState.WAITING_STEP

    def _write_actions(self, k: int, actions: Any) -> None:
        leaves_out = self._act_leaves
        if len(leaves_out) == 1 and self._act_schema["kind"] not in ("Dict", "Tuple"):
            values = [actions]
        else:
            values = [self._leaf(actions, path) for path, _ in leaves(self._act_schema)]
        for target, value in zip(leaves_out, values):
            row = target[k]
            array = np.asarray(value)
            if array.shape != row.shape:
                raise ValueError(
                    f"actions of shape {array.shape} do not match the batched action space "
                    f"{self.action_space} (expected shape {row.shape})"
                )
            np.copyto(row, array, casting="unsafe")

    @staticmethod
    def _leaf(actions: Any, path: tuple) -> Any:
        for part in path:
            actions = actions[part]
        return actions

    def step_wait(self, timeout: float | None = None) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict]:
        """Wait for the step started by ``step_async``; see the module docstring for view validity."""
        if self.closed:
            raise ClosedEnvironmentError("this VectorPortal is closed")
        if self._state is not AsyncState.WAITING_STEP:
            raise NoAsyncCallError("Calling `step_wait` without any prior call to `step_async`.", AsyncState.WAITING_STEP.value)
        timeout = self.step_timeout if timeout is None else timeout
        deadline = None if timeout is None else time.monotonic() + timeout
        k = self._slot
        extras: dict = {}
        infos: dict = {}
        error: Optional[EnvError] = None
        recovery = self._recovery
        failed: list = []
        try:
            # Servers own ascending env ranges: batching each one's infos as soon as it is done
            # keeps env order (as gymnasium's) and hides the work behind the slower servers.
            for server in self._session.servers:
                try:
                    if recovery.failed_early and server.index in recovery.failed_early:
                        failed.append((server, recovery.failed_early.pop(server.index)))
                        continue
                    if recovery.ended and server.index in recovery.ended:
                        failed.append((server, None))
                        continue
                    if recovery.resetting and server.index in recovery.resetting:
                        extras.update(recovery.finish_reset(server, timeout))
                    else:
                        self._wait_done(server, deadline)
                        row = self._mailbox[server.index]
                        if row[_STATUS] == STATUS_ERROR or row[_EXTRA]:
                            message = server.recv(timeout, "step")
                            if message["cmd"] == P.ERROR:
                                raise server.error(message)
                            elif message["cmd"] == P.EXTRA:
                                extras.update(check_blobs(message.get("blobs"), server.env_indices, server.describe()))
                            else:
                                raise ServerProtocolError(f"{server.describe()} sent {message['cmd']!r:.40} during a step")
                    if error is None:
                        infos = self._gather(k, extras, infos, server.env_indices)
                except RESTARTABLE as exc:
                    if recovery.enabled:
                        failed.append((server, exc))
                    elif isinstance(exc, EnvError):
                        error = error or exc
                    else:
                        raise
            # -- recovery: restart failed servers, end their envs' episodes in this slot --
            for server, exc in failed:
                infos = recovery.end_episodes(server, k, infos, exc)
            self._state = AsyncState.DEFAULT
            if error is not None:
                raise error
        except BaseException as exc:
            self._fail(exc)
            raise
        reward, terminated, truncated = self._results_views[k]
        if self.copy:
            reward, terminated, truncated = reward.copy(), terminated.copy(), truncated.copy()
        return self._observations(k), reward, terminated, truncated, infos

    def step(self, actions: Any) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict]:
        """Step every env once; observations are ring views unless ``copy=True``."""
        self.step_async(actions)
        return self.step_wait()

    def _control(self, messages: list, what: str) -> list:
        self._check_usable()
        if self._state is not AsyncState.DEFAULT:
            raise AlreadyPendingCallError(
                f"calling `{what}` while waiting for a pending call to `{self._state.value}` to complete",
                str(self._state.value),
            )
        try:
            sent, failed = self._send_all(messages)
            _, error, more_failed = self._replies(what, sent)
            failed.update(more_failed)
            # -- recovery: restart broken servers; the call still raises, their envs end next step --
            for server, exc in failed.items():
                self._recovery.after_control_failure(server, exc)
        except BaseException as exc:
            self._fail(exc)
            raise
        if failed:
            raise next(iter(failed.values()))
        if error is not None:
            raise error
        if len(self._results) not in (0, self.num_envs):
            raise ServerProtocolError(f"env servers returned {len(self._results)} results for {self.num_envs} envs")
        return self._results

    def call(self, name: str, *args: Any, **kwargs: Any) -> tuple[Any, ...]:
        """Call ``name`` on every env (or read it, when it is not callable); results must be msgpack-able."""
        message = {"cmd": P.CALL, "name": name, "args": list(args), "kwargs": kwargs}
        return tuple(self._control([message] * len(self._session.servers), f"call({name!r})"))

    def get_attr(self, name: str) -> tuple[Any, ...]:
        return self.call(name)

    def set_attr(self, name: str, values: list | tuple | Any) -> None:
        if not isinstance(values, (list, tuple)):
            values = [values for _ in range(self.num_envs)]
        if len(values) != self.num_envs:
            raise ValueError(
                "Values must be a list or tuple with length equal to the number of environments. "
                f"Got `{len(values)}` values for {self.num_envs} environments."
            )
        messages = [{"cmd": P.SET_ATTR, "name": name, "values": [values[i] for i in server.env_indices]}
                    for server in self._session.servers]
        self._control(messages, f"set_attr({name!r})")

    def render(self) -> tuple[Any, ...] | None:
        """Each env's ``render()`` result, as SyncVectorEnv returns them."""
        return tuple(self._control([{"cmd": P.RENDER}] * len(self._session.servers), "render"))

    def close_extras(self, **kwargs: Any) -> None:
        """Stop the servers and remove the ring, semaphores, sockets and run directory."""
        self._finalizer()

    @property
    def servers(self) -> list[dict]:
        """Where each env lives: server index, env indices, runtime description."""
        return [{"server": s.index, "envs": list(s.env_indices), "runtime": s.handle.describe()}
                for s in self._session.servers if s.handle is not None]

    @property
    def shm_name(self) -> str:
        return self._session.resources.shm_name

    def __repr__(self) -> str:
        return f"VectorPortal({self._session.servers[0].spec.id if self._session.servers else '?'}, num_envs={self.num_envs})"
