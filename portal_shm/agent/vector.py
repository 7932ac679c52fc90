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
from typing import Any, Callable, Optional, Sequence, Union

import numpy as np
from gymnasium import logger
from gymnasium.error import ClosedEnvironmentError
from gymnasium.spaces import Space
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import batch_differing_spaces, batch_space, iterate

from ..errors import EnvError, PortalError, PortalTimeoutError, RestartLimitError, ServerDiedError, ServerProtocolError
from ..runtimes.backend import Backend
from ..wire import protocol as P
from ..wire.doorbell import spin_until
from ..wire.layout import EXTRA, STATUS, STATUS_ERROR, STATUS_PENDING, ring_layout
from ..wire.schema import has_opaque, is_fixed, leaf_shape_dtype, leaves, revive, space_to_schema
from . import env_fns as F
from .batched import AsyncBatches
from .contract import PortalVectorEnv
from .control import POLL_SLICE
from .infos import add_info
from .pending import AsyncState, PendingCall
from .recovery import RESTARTABLE, Recovery, fixed_obs_views
from .session import PortalSession, ServerLink
from .spaces import schema_to_space
from .spec import EnvSpec
from .spin import default_spin_wait, server_spin
from .validate import check_blobs, check_reply, decode_infos, space_from_schema

DEFAULT_RING_DEPTH = 4  # batches the ring holds (remote lockstep replies reuse as many arrays)


def seed_list(seed: int | list | None, num_envs: int) -> list:
    """One seed per env as gymnasium's vector envs take them: None, ``seed + i``, or a list of N."""
    if seed is None:
        seeds = [None] * num_envs
    elif isinstance(seed, (int, np.integer)):
        seeds = [int(seed) + i for i in range(num_envs)]
    else:
        seeds = list(seed)
    if len(seeds) != num_envs:
        raise ValueError(
            f"If seeds are passed as a list the length must match num_envs={num_envs} but got length={len(seeds)}."
        )
    return seeds


def _layout_of(schema: dict) -> list:
    """What the ring needs of a space: each leaf's kind, shape and dtype, bounds aside."""
    return [
        (leaf["kind"],) + (tuple(map(str, leaf_shape_dtype(leaf))) if is_fixed(leaf) else ())
        for _, leaf in leaves(schema)
    ]


def _subspace(space: Any, path: tuple) -> Any:
    for part in path:
        space = space[part]
    return space


def _tree_copy(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return value.copy()
    if isinstance(value, dict):
        return {k: _tree_copy(v) for k, v in value.items()}
    if isinstance(value, tuple):
        items = [_tree_copy(v) for v in value]
        return type(value)(*items) if hasattr(value, "_fields") else tuple(items)  # GraphInstance
    return copy_module.deepcopy(value)


class VectorPortal(AsyncBatches, PortalVectorEnv):
    """Steps envs that live in other runtimes as one batched gymnasium ``VectorEnv``.

    A drop-in for ``gymnasium.vector.AsyncVectorEnv``: ``VectorPortal(env_fns, ...)`` takes the same
    arguments (see ``portal_shm.agent.env_fns`` for how the factories reach the env runtimes).

    Args:
        env_fns: one entry per env: a callable that makes it (a lambda, closure, ``functools.partial``
            or class, as for AsyncVectorEnv; shipped with cloudpickle to ``backend``) or an
            ``EnvSpec`` naming an env id or entry point (``make_vec`` builds these for you).
            Consecutive envs of one backend share env servers, ``envs_per_server`` each.
        shared_memory: with factories, as AsyncVectorEnv: True refuses observation spaces gymnasium
            cannot keep in shared memory (custom spaces, Graph, Sequence) with its errors; False
            serves them, their values travelling beside the ring. ``EnvSpec`` lists always serve
            them. Fixed-layout values live in the ring either way.
        copy: return fresh arrays every call instead of ring views (see the module docstring for
            how long views stay valid). Default: True with factories (as AsyncVectorEnv), False for
            a list of ``EnvSpec``.
        context, daemon: accepted for AsyncVectorEnv code and ignored: env servers are always fresh
            processes (like the "spawn" start method) that exit when the agent does.
        worker: not supported (there is no worker loop to replace); must be None.
        observation_mode: ``"same"`` (all envs have equal observation spaces), ``"different"``
            (one shape and dtype, other bounds, e.g. two versions of an env side by side) or a tuple
            ``(observation_space, single_observation_space)``, as in gymnasium's vector envs.
        autoreset_mode: gymnasium's ``AutoresetMode`` (NEXT_STEP, SAME_STEP or DISABLED).
        max_concurrency: at most this many envs step at the same time (caps the env servers).
        backend: where factories run: ``"process"`` (default) or ``"venv"``, or a Backend instance
            of those kinds; ``EnvSpec`` entries carry their own backend.
        ring_depth: number of batches the ring holds; a returned view survives ``ring_depth - 1``
            further calls.
        envs_per_server: envs hosted by one server process. Default: spread the envs over as many
            servers as there are CPU cores; one process per core avoids wake-up storms.
        info_capacity: bytes reserved per env and slot for its encoded infos; larger infos (e.g.
            SAME_STEP's ``final_obs``) travel over the control channel instead.
        startup_timeout: seconds to wait for servers to create their envs and connect.
        step_timeout: seconds a step, reset or call may take before ``PortalTimeoutError``;
            None waits as long as the servers live (a dead server is always reported at once).
        batch_size: envpool-style async stepping when smaller than the number of envs: ``recv()``
            returns the first ``batch_size`` envs to finish (their ids in ``infos["env_id"]``) and
            ``send(actions, env_ids)`` steps them again while the others still run. Servers are
            the unit of asynchrony, so it must be a multiple of ``envs_per_server`` (by default the
            largest divisor of both ``batch_size`` and the number of envs that spreads the envs
            over the cores). See ``recv`` for when the batch is a view and when a copy.
        on_env_failure: ``"raise"`` (default) or ``"restart"``: replace a failed env server by a
            fresh one and end its envs' episodes as truncated with ``info["env_restarted"]``, in
            lockstep and in async batches alike (there in the batch that hands the failed server
            out, the other batches in flight undisturbed); the rules, and the seeds restarted envs
            get, are in ``portal_shm.agent.recovery``.
        max_restarts: restarts allowed per env over the portal's life with ``"restart"``; the
            next failure raises ``RestartLimitError``.
        spin_wait: seconds the agent and each server watch the ring for the other side before they
            sleep on their doorbell pipe (the core is yielded at every turn); 0 never spins. Default:
            ``portal_shm.agent.spin.default_spin_wait()``.
    """

    def __init__(
        self,
        env_fns: Sequence[Union[EnvSpec, Callable[[], Any]]],
        *,
        shared_memory: bool = True,
        copy: Optional[bool] = None,
        context: Optional[str] = None,
        daemon: bool = True,
        worker: Optional[Callable[..., Any]] = None,
        observation_mode: Union[str, tuple[Space, Space]] = "same",
        autoreset_mode: str | AutoresetMode = AutoresetMode.NEXT_STEP,
        max_concurrency: Optional[int] = None,
        backend: Union[str, Backend] = "process",
        ring_depth: int = DEFAULT_RING_DEPTH,
        envs_per_server: Optional[int] = None,
        info_capacity: int = 4096,
        startup_timeout: float = 120.0,
        step_timeout: Optional[float] = None,
        batch_size: Optional[int] = None,
        on_env_failure: str = "raise",
        max_restarts: int = 3,
        spin_wait: Optional[float] = None,
    ) -> None:
        F.check_options(context, worker, max_concurrency)
        specs, self._gymnasium_form = F.to_specs(env_fns, backend)
        if not (
            observation_mode in ("same", "different")
            or (isinstance(observation_mode, tuple) and len(observation_mode) == 2)
        ):
            raise ValueError(
                "Invalid `observation_mode`, expected: 'same' or 'different' or tuple of single and batch "
                f"observation space, actual got {observation_mode}"
            )
        if isinstance(observation_mode, tuple) and not all(isinstance(s, Space) for s in observation_mode):
            raise TypeError(
                f"Expected both elements of observation_mode to be Spaces, got "
                f"{type(observation_mode[0])} and {type(observation_mode[1])}"
            )
        self.observation_mode = observation_mode
        if ring_depth < 2:
            raise ValueError(f"ring_depth must be at least 2, got {ring_depth}")
        self.env_fns = list(env_fns)
        self.shared_memory, self.context, self.daemon, self.worker = shared_memory, context, daemon, worker
        self.max_concurrency = max_concurrency
        self.num_envs = len(specs)
        self.autoreset_mode = (
            autoreset_mode if isinstance(autoreset_mode, AutoresetMode) else AutoresetMode(autoreset_mode)
        )
        self.batch_size = self.num_envs if batch_size is None else int(batch_size)
        self._async = self.batch_size != self.num_envs
        if self._async:
            if self.autoreset_mode is AutoresetMode.DISABLED:
                raise ValueError(
                    "batch_size needs autoreset (NEXT_STEP or SAME_STEP): with DISABLED a finished env "
                    "could only be reset by a masked reset, which async batches do not have"
                )
            envs_per_server = self._async_grouping(specs, envs_per_server)
        self.copy = self._gymnasium_form if copy is None else copy
        self.ring_depth = ring_depth
        self.step_timeout = step_timeout
        self.spin_wait = default_spin_wait() if spin_wait is None else max(0.0, float(spin_wait))
        self.closed = False
        self._pending = PendingCall()
        self._broken: Optional[BaseException] = None
        self._slot = -1
        self._raw_infos = False
        bases = {spec.backend.run_dir_base() for spec in specs}
        if len(bases) > 1:
            raise ValueError(
                f"these backends need their run directories in different places: {sorted(map(str, bases))}"
            )
        self._session = PortalSession(bases.pop())
        self._finalizer = weakref.finalize(self, self._session.shutdown)
        try:
            self._start(
                specs,
                F.envs_per_server(self.num_envs, envs_per_server, max_concurrency),
                startup_timeout,
                info_capacity,
            )
            # -- recovery policy (portal_shm/agent/recovery.py) --
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
        if self._gymnasium_form and (has_opaque(self._obs_schema) or has_opaque(self._act_schema)):
            local = F.local_spaces(specs[0].factory) if specs[0].factory is not None else None
            if local is not None:
                self.single_observation_space, self.single_action_space = local
        mode = self.observation_mode
        if isinstance(mode, tuple):
            self.single_observation_space = mode[1]
            self._obs_schema = space_to_schema(mode[1])
        for i, (obs, act) in enumerate(zip(obs_schemas, act_schemas)):
            if mode != "same" and _layout_of(obs) != _layout_of(self._obs_schema):
                raise RuntimeError(
                    f"VectorPortal(..., observation_mode='different' or custom space) however the sub-environment's "
                    f"observation spaces do not share a common shape and dtype: env {i} has {schema_to_space(obs)}, "
                    f"expected the layout of {self.single_observation_space}"
                )
            if mode == "same" and P.packb(obs) != P.packb(self._obs_schema):
                raise RuntimeError(
                    "VectorPortal(..., observation_mode='same') however some of the sub-environments observation "
                    f"spaces are not equivalent: env {i} has {schema_to_space(obs)}, env 0 has "
                    f"{self.single_observation_space}. If this is intentional, use `observation_mode='different'` "
                    "instead (spaces of one shape and dtype with other bounds)."
                )
            if P.packb(act) != P.packb(self._act_schema):
                raise RuntimeError(
                    f"Some environments have an action space different from `{self.single_action_space}`: env {i} "
                    f"has {schema_to_space(act)}. In order to batch actions, the action spaces from all "
                    "environments must be equal."
                )
        if self._gymnasium_form and self.shared_memory:
            F.check_shared_memory(self.single_observation_space)
        if isinstance(mode, tuple):
            self.observation_space = mode[0]
        elif mode == "different":
            self.observation_space = batch_differing_spaces([schema_to_space(obs) for obs in obs_schemas])
        else:
            self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        if self._async:
            self.observation_space = batch_space(self.single_observation_space, self.batch_size)
            self.action_space = batch_space(self.single_action_space, self.batch_size)
        first = session.servers[0].hello
        self.metadata = dict(first.get("metadata") or {})
        self.metadata["autoreset_mode"] = self.autoreset_mode
        self.render_mode = first.get("render_mode")

        layout = ring_layout(
            self._obs_schema, self._act_schema, self.num_envs, self.ring_depth, len(session.servers), info_capacity
        )
        ring = session.attach(
            layout,
            {
                "autoreset_mode": self.autoreset_mode.value,
                "observation_schema": self._obs_schema,
                "action_schema": self._act_schema,
                "spin": server_spin(self.spin_wait, len(session.servers)),
            },
            timeout,
        )
        views = ring.views
        self._mailbox = views["mailbox"]
        self._reward, self._terminated, self._truncated = views["reward"], views["terminated"], views["truncated"]
        self._info_len, self._info = views["info_len"], views["info"]
        self._info_capacity = info_capacity
        # Actions of spaces without a fixed layout are sent as a message (one per server and step).
        self._act_leaves = (
            [views[f"act.{j}"] for j in range(len(leaves(self._act_schema)))] if is_fixed(self._act_schema) else None
        )
        self._var_spaces = {
            index: _subspace(self.single_observation_space, path)
            for index, (path, leaf) in enumerate(leaves(self._obs_schema))
            if not is_fixed(leaf)
        }
        self._obs_views, self._obs_fixed_views = fixed_obs_views(self._obs_schema, views)
        self._build_obs = self._obs_builder(self._obs_schema, views, [0])
        has_variable_leaves = not all(is_fixed(leaf) for _, leaf in leaves(self._obs_schema))
        self._obs_slots = (
            None
            if has_variable_leaves
            else [self._build_obs(lambda index, array, k=k: array[k], None) for k in range(self.ring_depth)]
        )
        self._var_obs: list = [None] * self.num_envs
        self._results_views = [
            (self._reward[k], self._terminated[k], self._truncated[k]) for k in range(self.ring_depth)
        ]
        if self._async:
            self._start_batches()

    def _obs_builder(self, schema: dict, views: dict, counter: list) -> Callable[[Callable, Optional[list]], Any]:
        """Build ``f(pick, var)``: the observation tree, each fixed leaf ``pick(index, ring_array)``,
        each variable-layout leaf taken from ``var`` (one decoded dict per env of the batch)."""
        kind = schema["kind"]
        if kind == "Dict":
            parts = [(key, self._obs_builder(sub, views, counter)) for key, sub in schema["spaces"]]
            return lambda pick, var: {key: build(pick, var) for key, build in parts}
        if kind == "Tuple":
            items = [self._obs_builder(sub, views, counter) for sub in schema["spaces"]]
            return lambda pick, var: tuple(build(pick, var) for build in items)
        index = counter[0]
        counter[0] += 1
        if is_fixed(schema):
            array = views[f"obs.{index}"]
            return lambda pick, var: pick(index, array)
        return lambda pick, var: tuple(env_var[index] for env_var in var)

    # -- waiting on servers --------------------------------------------------------------
    def _wait_done(self, server: ServerLink, deadline: Optional[float]) -> None:
        """Wait until ``server`` replaced its PENDING status: spin a while, then sleep on its pipe
        (whose rings may be left from steps seen while spinning: the status word is the truth)."""
        words = server.mailbox
        if spin_until(lambda: words[STATUS] != STATUS_PENDING, self.spin_wait):
            server.done.skipped()
            return
        done = server.done
        check_at = time.monotonic() + POLL_SLICE
        while True:
            if done.wait(POLL_SLICE) and words[STATUS] != STATUS_PENDING:
                return
            now = time.monotonic()
            if now >= check_at:
                server.check_alive()
                if deadline is not None and now > deadline:
                    raise PortalTimeoutError(
                        f"{server.describe()} did not finish its step within "
                        f"{self.step_timeout} s (step_timeout): hung or too slow"
                    )
                check_at = now + POLL_SLICE

    def _check_usable(self) -> None:
        if self.closed:
            raise ClosedEnvironmentError("this VectorPortal is closed")
        if self._broken is not None:
            raise PortalError(f"this VectorPortal cannot continue after an earlier failure: {self._broken}")

    def _fail(self, exc: BaseException) -> None:
        if isinstance(
            exc, (ServerDiedError, PortalTimeoutError, ServerProtocolError, RestartLimitError, KeyboardInterrupt)
        ):
            self._broken = exc
            self._session.graceful = False

    # -- infos and observations ----------------------------------------------------------
    def _gather(
        self, k: int, extras: dict, infos: dict, envs: Optional[list] = None, first: int = -1, total: int = 0
    ) -> dict:
        """Decode and batch the infos of ``envs`` (all by default), in env order, into ``infos``.

        Async batches put env ``envs[j]`` at position ``first + j`` of a batch of ``total`` envs.
        """
        lengths = self._info_len[k].tolist()
        total = total or self.num_envs
        for j, i in enumerate(range(self.num_envs) if envs is None else envs):
            position = i if first < 0 else first + j
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
                    if self._var_spaces and "final_obs" in env_info:
                        env_info["final_obs"] = self._revive(self.single_observation_space, env_info["final_obs"], i)
                    try:
                        infos = {**infos, **env_info} if self._raw_infos else add_info(infos, env_info, position, total)
                    except Exception as exc:
                        raise ServerProtocolError(
                            f"env {i}'s infos cannot be batched with the others': {exc}"
                        ) from None
            if var_obs is not None:
                self._var_obs[i] = {
                    index: self._revive(self._var_spaces.get(index), value, i) for index, value in var_obs.items()
                }
        return infos

    @staticmethod
    def _revive(space: Any, value: Any, env: int) -> Any:
        try:
            return value if space is None else revive(space, value)
        except Exception as exc:  # the value came from an env runtime: malformed is a protocol error
            raise ServerProtocolError(f"env {env} sent a value that does not fit {space}: {exc}") from None

    def _observations(self, k: int) -> Any:
        if self._obs_slots is not None:
            obs = self._obs_slots[k]
        else:
            try:
                obs = self._build_obs(lambda index, array: array[k], self._var_obs)
            except (KeyError, TypeError, IndexError) as exc:
                raise ServerProtocolError(f"an env sent an incomplete variable-layout observation: {exc}") from None
        return _tree_copy(obs) if self.copy else obs

    # -- the gymnasium API ---------------------------------------------------------------
    def _check_idle(self, what: str) -> None:
        self._pending.check_idle(what)

    def reset_async(self, seed: int | list | None = None, options: dict | None = None) -> None:
        """Send the reset to every server and return at once; ``reset_wait`` collects the results."""
        self._check_usable()
        seeds = self._seeds(seed)
        self._check_idle("reset_async")
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
        if self._async:
            if mask is not None:
                raise ValueError(
                    "options['reset_mask'] is not supported with batch_size: reset(seed=...) resets every "
                    "env and recv() then hands them out batch by batch"
                )
            self._reset_batches(seeds, options)
            self._pending.begin(AsyncState.WAITING_RESET)
            return
        messages = []
        k, prev = (self._slot + 1) % self.ring_depth, max(self._slot, 0)
        self._recovery.note_reset(seeds, mask)
        for server in self._session.servers:
            envs = server.env_indices
            messages.append(
                {
                    "cmd": P.RESET,
                    "slot": k,
                    "prev_slot": prev,
                    "seeds": [seeds[i] for i in envs],
                    "options": options,
                    "mask": None if mask is None else [bool(mask[i]) for i in envs],
                }
            )
        self._send_control(messages, "reset_async", AsyncState.WAITING_RESET)
        self._slot = k
        self._reset_messages = messages

    def reset_wait(self, timeout: float | None = None) -> tuple[Any, dict]:
        """Results of ``reset_async``; ``timeout`` (seconds) raises ``PortalTimeoutError``, also a
        ``multiprocessing.TimeoutError`` as with AsyncVectorEnv (the portal cannot continue then)."""
        self._check_usable()
        self._pending.check_waiting(AsyncState.WAITING_RESET)
        if self._async:
            self._pending.end()
            obs, _, _, _, infos = self.recv(timeout)
            return obs, infos
        k = self._slot
        try:
            extras, errors, failed = self._replies("reset", timeout, self._sent)
            failed.update(self._send_failed)
            self._pending.end()
            # -- recovery: restart failed servers and repeat the reset for their envs --
            restarted = []
            for server, cause in failed.items():
                extras.update(self._recovery.retry_reset(server, self._reset_messages[server.index], cause))
                restarted.extend(server.env_indices)
            if errors:
                self._raise_env_errors(errors)
            infos = self._gather(k, extras, {})
            for i in restarted:
                infos = add_info(infos, {"env_restarted": True}, i, self.num_envs)
        except BaseException as exc:
            self._pending.end()
            self._fail(exc)
            raise
        return self._observations(k), infos

    def _seeds(self, seed: int | list | None) -> list:
        return seed_list(seed, self.num_envs)

    def _raise_env_errors(self, errors: list) -> None:
        """Raise an env's error: the first one, or in the env_fns form the last one after logging all
        as AsyncVectorEnv does (whose failed workers shut down: the portal then refuses further calls)."""
        if self._gymnasium_form:
            F.log_env_errors(errors)
            self._broken = errors[-1]
            raise errors[-1]
        raise errors[0]

    def _send_all(self, messages: list) -> tuple[list, dict]:
        """Send each server its control message; (servers reached, failed server -> exception)."""
        sent, failed = [], {}
        for server, message in zip(self._session.servers, messages):
            try:
                server.channel.send(message, server.check_alive)
                server.post(P.CMD_CONTROL)
                sent.append(server)
            except RESTARTABLE as exc:
                if not self._recovery.enabled:
                    raise
                failed[server] = exc
        return sent, failed

    def _replies(
        self, what: str, timeout: Optional[float] = None, servers: Optional[list] = None
    ) -> tuple[dict, list, dict]:
        """Collect one reply per server (always all of them, to stay in step) and every env error.

        With ``on_env_failure="restart"`` a failed server does not stop the collection: it is
        returned in the third item (server -> exception) for the caller to recover. A reset
        counts an env's exception as a failure, other calls only a broken server.
        """
        extras: dict = {}
        results: list = []
        errors: list = []
        failed: dict = {}
        restart = self._recovery.enabled
        timeout = self.step_timeout if timeout is None else timeout
        deadline = None if timeout is None else time.monotonic() + timeout
        for server in self._session.servers if servers is None else servers:
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                message = server.recv(remaining, what)
                if message["cmd"] == P.ERROR:
                    server_errors = server.errors(message)
                    if restart and what == "reset":
                        raise server_errors[0]
                    errors.extend(server_errors)
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
        return extras, errors, failed

    def step_async(self, actions: Any) -> None:
        """Write the actions into the ring and wake every server; returns at once."""
        self._check_usable()
        self._check_idle("step_async")
        if self._async:
            self.send(actions)
            self._pending.begin(AsyncState.WAITING_STEP)
            return
        k = (self._slot + 1) % self.ring_depth
        cmd = P.CMD_STEP
        if self._act_leaves is None:
            self._send_actions(actions)
            cmd = P.CMD_STEP_ACTIONS
        else:
            try:
                self._write_actions(k, actions)
            except (ValueError, TypeError):
                if not self._gymnasium_form:
                    raise
                # AsyncVectorEnv hands each env its element of the batch, whatever its shape: e.g.
                # [0, 1, 2] for three Box(0, 1, (1,)) envs. Such a batch travels as a message.
                self._send_actions(actions)
                cmd = P.CMD_STEP_ACTIONS
        self._slot = k
        recovery = self._recovery
        for server in self._session.servers:
            if (recovery.resetting or recovery.ended) and recovery.begin_step(server, k):
                continue  # a restarted server's envs: reset instead of step, or end the episode
            server.post(cmd, k, pending=True)
        self._pending.begin(AsyncState.WAITING_STEP)

    def _send_actions(self, actions: Any) -> None:
        """Actions without a fixed layout: one message per server, each env's action as msgpack."""
        per_env = list(iterate(self.action_space, actions))
        if len(per_env) != self.num_envs:
            raise ValueError(f"got {len(per_env)} actions for {self.num_envs} envs")
        messages = [
            {"cmd": P.ACTIONS, "actions": [per_env[i] for i in server.env_indices]} for server in self._session.servers
        ]
        for message in messages:
            P.packb(message)  # raises TypeError naming an unsendable value before any server is told
        try:
            for server, message in zip(self._session.servers, messages):
                server.channel.send(message, server.check_alive)
        except BaseException as exc:
            self._fail(exc)
            raise

    def _action_leaves(self, actions: Any) -> list:
        """The actions split into the action space's leaves, in ring order (``act.0``, ``act.1``, ...)."""
        if len(self._act_leaves) == 1 and self._act_schema["kind"] not in ("Dict", "Tuple"):
            return [actions]
        return [self._leaf(actions, path) for path, _ in leaves(self._act_schema)]

    def _write_actions(self, k: int, actions: Any) -> None:
        for target, value in zip(self._act_leaves, self._action_leaves(actions)):
            row = target[k]
            array = np.asarray(value)
            if array.shape != row.shape:
                if array.ndim == 0 < row.ndim:
                    raise TypeError(
                        f"actions must hold one action per env (shape {row.shape}), got the scalar {value!r}"
                    )
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
        """Wait for the step started by ``step_async``; see the module docstring for view validity.

        ``timeout`` (seconds) raises ``PortalTimeoutError``, also a ``multiprocessing.TimeoutError``
        as with AsyncVectorEnv; the portal cannot continue after it.
        """
        if self.closed:
            raise ClosedEnvironmentError("this VectorPortal is closed")
        self._pending.check_waiting(AsyncState.WAITING_STEP)
        if self._async:
            self._pending.end()
            return self.recv(timeout)
        timeout = self.step_timeout if timeout is None else timeout
        deadline = None if timeout is None else time.monotonic() + timeout
        k = self._slot
        extras: dict = {}
        infos: dict = {}
        errors: list = []
        recovery = self._recovery
        failed: list = []
        try:
            servers = self._session.servers
            # Servers own ascending env ranges: batching each one's infos as soon as it is done
            # keeps env order (as gymnasium's) and hides the work behind the slower servers.
            for server in servers:
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
                        if row[STATUS] == STATUS_ERROR or row[EXTRA]:
                            message = server.recv(timeout, "step")
                            if message["cmd"] == P.ERROR:
                                server_errors = server.errors(message)
                                if recovery.enabled:
                                    raise server_errors[0]
                                errors.extend(server_errors)
                            elif message["cmd"] == P.EXTRA:
                                extras.update(check_blobs(message.get("blobs"), server.env_indices, server.describe()))
                            else:
                                raise ServerProtocolError(
                                    f"{server.describe()} sent {message['cmd']!r:.40} during a step"
                                )
                    if not errors:
                        infos = self._gather(k, extras, infos, server.env_indices)
                except RESTARTABLE as exc:
                    if recovery.enabled:
                        failed.append((server, exc))
                    elif isinstance(exc, EnvError):
                        errors.append(exc)
                    else:
                        raise
            # -- recovery: restart failed servers, end their envs' episodes in this slot --
            for server, exc in failed:
                infos = recovery.end_episodes(server, k, infos, exc)
            self._pending.end()
            if errors:
                self._raise_env_errors(errors)
        except BaseException as exc:
            self._pending.end()
            self._fail(exc)
            raise
        reward, terminated, truncated = self._results_views[k]
        if self.copy:
            reward, terminated, truncated = reward.copy(), terminated.copy(), truncated.copy()
        return self._observations(k), reward, terminated, truncated, infos

    def _send_control(self, messages: list, what: str, state: AsyncState) -> None:
        """Send one control message per server and wake it; the replies are collected later."""
        self._check_usable()
        self._check_idle(what)
        for message in messages:
            P.packb(message)  # raises TypeError naming an unsendable value before any server is told
        try:
            if self._async:
                self._settle()
            self._sent, self._send_failed = self._send_all(messages)
        except BaseException as exc:
            self._fail(exc)
            raise
        self._pending.begin(state)

    def _control_wait(self, what: str, timeout: Optional[float]) -> list:
        try:
            _, errors, failed = self._replies(what, timeout, self._sent)
            failed.update(self._send_failed)
            # -- recovery: restart broken servers; the call still raises, their envs end next step --
            for server, exc in failed.items():
                self._recovery.after_control_failure(server, exc)
        except BaseException as exc:
            self._pending.end()
            self._fail(exc)
            raise
        self._pending.end()
        if failed:
            raise next(iter(failed.values()))
        if errors:
            self._raise_env_errors(errors)
        if len(self._results) not in (0, self.num_envs):
            raise ServerProtocolError(f"env servers returned {len(self._results)} results for {self.num_envs} envs")
        return self._results

    def _control(self, messages: list, what: str) -> list:
        self._send_control(messages, what, AsyncState.WAITING_CALL)
        return self._control_wait(what, None)

    def call_async(self, name: str, *args: Any, **kwargs: Any) -> None:
        """Start ``call(name, ...)`` on every env and return at once; ``call_wait`` collects the results."""
        if self._gymnasium_form and name in ("reset", "step", "close"):  # as AsyncVectorEnv refuses them
            raise ValueError(f"Trying to call function `{name}` with `call`, use `{name}` directly instead.")
        message = {"cmd": P.CALL, "name": name, "args": list(args), "kwargs": kwargs}
        self._send_control([message] * len(self._session.servers), "call_async", AsyncState.WAITING_CALL)

    def call_wait(self, timeout: float | None = None) -> tuple[Any, ...]:
        """Results of ``call_async``, one per env; ``timeout`` as for ``step_wait``."""
        self._check_usable()
        self._pending.check_waiting(AsyncState.WAITING_CALL)
        return tuple(self._control_wait("call", timeout))

    def get_attr(self, name: str) -> tuple[Any, ...]:
        return self.call(name)

    @property
    def np_random_seed(self) -> tuple[Any, ...]:
        """Each env's ``np_random_seed``, as AsyncVectorEnv returns it."""
        return self.get_attr("np_random_seed")

    @property
    def np_random(self) -> tuple[Any, ...]:
        """Each env's ``np_random`` as AsyncVectorEnv returns it, where the values can be sent (they
        cannot: a Generator is not data, so this raises an ``EnvError`` saying so)."""
        return self.get_attr("np_random")

    def set_attr(self, name: str, values: list | tuple | Any) -> None:
        if not isinstance(values, (list, tuple)):
            values = [values for _ in range(self.num_envs)]
        if len(values) != self.num_envs:
            raise ValueError(
                "Values must be a list or tuple with length equal to the number of environments. "
                f"Got `{len(values)}` values for {self.num_envs} environments."
            )
        messages = [
            {"cmd": P.SET_ATTR, "name": name, "values": [values[i] for i in server.env_indices]}
            for server in self._session.servers
        ]
        self._control(messages, f"set_attr({name!r})")

    def render(self) -> tuple[Any, ...] | None:
        """Each env's ``render()`` result, as SyncVectorEnv returns them."""
        return tuple(self._control([{"cmd": P.RENDER}] * len(self._session.servers), "render"))

    _copy_tree = staticmethod(_tree_copy)

    def close_extras(self, timeout: float | None = None, terminate: bool = False, **kwargs: Any) -> None:
        """Stop the servers and remove the ring, sockets and run directory.

        As AsyncVectorEnv: a pending call is first waited for (up to ``timeout`` seconds), with a
        warning; ``terminate=True`` stops the servers at once instead of closing their envs.
        """
        if not self._pending.idle and not self._session.closed:
            state = self._pending.state.value
            logger.warn(f"Calling `close` while waiting for a pending call to `{state}` to complete.")
            try:
                getattr(self, f"{state}_wait")(0 if terminate else timeout)
            except Exception:
                self._session.graceful = False
        if terminate:
            self._session.graceful = False
        self._finalizer()

    # -- for a driver outside this portal's thread (an env host's router steps lockstep itself) --------
    def doorbells(self) -> list:
        """The servers' done pipes (``Waiter``s, their ``fd`` to poll): readable when a server rang back."""
        return [server.done for server in self._session.servers]

    def step_finished(self, readable: Any) -> Optional[bool]:
        """After ``step_async``: whether every server finished, once the rings of the done pipes whose
        fds are in ``readable`` are read (None: a pipe closed, ``step_wait`` says why).

        Each ring is read as it comes: a pipe left readable would wake the caller's poll again at
        once, and it would spin until the slowest server finished, on the cores the servers need.
        The status words, not the rings, say who finished.
        """
        finished = True
        for server in self._session.servers:
            done = server.done
            if done.fd in readable:
                done.take()
                if done.closed:
                    return None
            if server.mailbox[STATUS] == STATUS_PENDING:
                finished = False
        return finished

    def abort(self) -> None:
        """Stop every env server now, from any thread (an env host freeing the envs of an agent that
        went away while they hang): what waits on them fails at once, ``close()`` still cleans up."""
        for server in list(self._session.servers):
            if server.handle is not None:
                try:
                    server.handle.stop(0)
                except Exception:
                    pass  # gone already, or its runtime failed: close() reports nothing more either

    @property
    def recovering(self) -> bool:
        """Whether the restart policy has a step to change (a restarted server's envs): then only
        ``step_wait`` finishes the step."""
        recovery = self._recovery
        return bool(recovery.resetting or recovery.ended or recovery.failed_early)

    @property
    def servers(self) -> list[dict]:
        """Where each env lives: server index, env indices, runtime description, and the server's
        process id on this host (a container's init process; None where unknown, e.g. remote)."""
        return [
            {"server": s.index, "envs": list(s.env_indices), "runtime": s.handle.describe(), "pid": s.handle.host_pid()}
            for s in self._session.servers
            if s.handle is not None
        ]

    @property
    def tag(self) -> str:
        """``psm-<pid>-<token>``: the name of this portal's run directory, memfd and containers."""
        return self._session.resources.tag

    def __repr__(self) -> str:
        return f"VectorPortal({self._session.servers[0].spec.id if self._session.servers else '?'}, num_envs={self.num_envs})"
