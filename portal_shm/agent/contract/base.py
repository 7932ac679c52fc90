"""The one promise every portal kind keeps: ``PortalVectorEnv``, what ``make_vec`` returns.

A local ``VectorPortal``, a ``RemoteVectorPortal`` (hosts elsewhere) and a ``RayVectorPortal``
(hosts Ray placed) are all this: gymnasium's ``VectorEnv`` with ``AsyncVectorEnv``'s async pairs
(``reset_async``/``reset_wait``, ``step_async``/``step_wait``, ``call_async``/``call_wait``, each
wait with a ``timeout``, gymnasium's errors for calls out of order), envpool's async batches
(``send``/``recv``/``async_reset``), ``call``/``get_attr``/``set_attr``/``render``, ``servers``
(where each env lives) and SyncVectorEnv's results.

The contract is implemented here, once: every check of a call's arguments, the async protocol,
and every per-env call (``call``/``get_attr``/``set_attr`` with or without indices, states,
frame capture, ``render``). The work is done by the drivers each kind composes, in one
vocabulary (``drivers.py``): ``_lockstep`` (every env at once), ``_batches`` (async batches,
None in a lockstep portal), ``_calls`` (per-env requests to the envs' owners), ``_health``
(whether the portal may go on) and ``_clock``; the contract calls them directly, after its
checks. ``tests/contract`` runs one suite over every kind.
"""

from __future__ import annotations

from abc import ABCMeta, abstractmethod
from dataclasses import dataclass
from typing import Any, Optional, Sequence

from gymnasium.vector import VectorEnv

from ...errors import PortalError, ServerProtocolError
from .checks import check_env_ids, per_env_values, reset_options, seed_list
from .drivers import BatchDriver, CallDriver, Clock, LockstepDriver, PortalHealth, Request, StepResult
from .pending import AsyncState, PendingCall

#: The per-env requests of the contract, in the kinds' common vocabulary (each kind's message names
#: differ: the ring protocol's commands locally, the host protocol's remotely).
OPS = ("call", "get_attr", "set_attr", "get_state", "record", "render")
#: Requests whose replies carry no values.
SILENT = ("set_attr", "record")
#: Names ``call`` refuses, as AsyncVectorEnv does: they have methods of their own.
NOT_CALLABLE = ("reset", "step", "close")


@dataclass(frozen=True)
class Asked:
    """A per-env call in flight: the envs in the caller's order and each owner's envs asked."""

    op: str
    what: str
    ids: list[int]
    chosen: dict[int, list[int]]


class PortalVectorEnv(VectorEnv, metaclass=ABCMeta):
    """A gymnasium ``VectorEnv`` whose envs live in isolated runtimes (see the module docstring).

    Every error of its own is a ``PortalError`` (``portal_shm.errors``); calls out of order raise
    gymnasium's ``AlreadyPendingCallError`` and ``NoAsyncCallError``, calls after ``close()`` its
    ``ClosedEnvironmentError``; ``close()`` itself raises nothing. What a step or reset raises
    depends on ``on_env_failure``. With ``"raise"`` (the default): an ``EnvError`` when an env
    raised (also the env's own type, ``ValueError`` say; the portal goes on, unless it was made of
    env functions, as AsyncVectorEnv), ``ServerDiedError`` for a server that exited, ``HostLostError``
    for a host that stopped answering, ``PortalTimeoutError`` past ``step_timeout``. With
    ``"restart"`` a failed server is restarted (a lost host reconnected) and the step returns, the
    failed envs' episodes ended (``infos["env_restarted"]``), until an env used up ``max_restarts``:
    ``RestartLimitError``. Either way ``MessageTooBigError`` and ``InfoEncodingError`` (an env gave
    a value that cannot be sent; the portal goes on) and ``ServerProtocolError`` (a server or host
    broke the protocol; ``ConnectionDroppedError``: its connection dropped a message). After a
    failure that leaves the servers mid-call (a timeout, a dead server, a protocol breach, used-up
    restarts) the portal cannot continue: every call but ``close()`` raises ``PortalError``.
    """

    num_envs: int
    batch_size: int
    closed: bool
    _pending: PendingCall
    _asked: Optional[Asked] = None

    #: Whether the envs' servers map this agent's memory (a local ring portal): then
    #: ``record_frames_shared`` hands each env a frame ring of its own.
    maps_agent_memory = False

    # -- what each kind composes (``drivers.py``) --------------------------------------------------
    _lockstep: LockstepDriver
    _batches: Optional[BatchDriver]
    _calls: CallDriver
    _health: PortalHealth
    _clock: Clock

    @abstractmethod
    def stats(self, window: float = 10.0) -> dict[str, Any]:
        """Where the time goes over the last ``window`` seconds: rates, per-env step latency, per
        server load, the agent's time inside and away from the portal, and the verdict ``bound``."""

    @property
    @abstractmethod
    def servers(self) -> list[dict[str, Any]]:
        """Where each env lives: one dict per env server with ``server`` (its index), ``envs`` (the
        env indices it hosts), ``runtime`` (a description) and ``pid`` (on its host, where known)."""

    # -- the kind of stepping ----------------------------------------------------------------
    @property
    def batched(self) -> bool:
        """Whether the portal steps in async batches (``batch_size < num_envs``)."""
        return self.batch_size < self.num_envs

    def _check_usable(self) -> None:
        self._health.check_usable(self.closed)

    def _require_batches(self, what: str) -> BatchDriver:
        self._check_usable()
        if self._batches is None:
            raise PortalError(
                f"{what}() is for async batches: create the portal with batch_size < num_envs "
                f"(vector_kwargs={{'batch_size': B}}); use step() for lockstep stepping"
            )
        return self._batches

    # -- reset and step ----------------------------------------------------------------------
    def reset(
        self, *, seed: int | list[int | None] | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        """Reset all envs (lockstep; ``options["reset_mask"]`` for some), or every env and return the
        first batch (async batches).

        Raises:
            EnvError: An env raised, or gave a value that cannot be sent (see the class docstring).
            ServerDiedError: An env server exited.
            HostLostError: An env host stopped answering (hosts elsewhere, or placed by Ray).
            PortalTimeoutError: No results within ``step_timeout`` (or the wait's ``timeout``).
            ServerProtocolError: A server or host broke the protocol.
            RestartLimitError: An env failed again after ``max_restarts`` restarts.
            ValueError: ``seed`` is a list of another length than ``num_envs``, or ``reset_mask`` is
                invalid (gymnasium's checks; ``TypeError`` for its type) or given with async batches.
            AlreadyPendingCallError: An async call is in flight (gymnasium's).
            PortalError: The portal cannot continue after an earlier failure.
        """
        self.reset_async(seed=seed, options=options)
        return self.reset_wait()

    def reset_async(self, seed: int | list[int | None] | None = None, options: dict[str, Any] | None = None) -> None:
        """Start the reset and return at once; ``reset_wait`` collects the results. ``seed``: None,
        an int (env ``i`` gets ``seed + i``) or one per env; ``options["reset_mask"]`` as gymnasium's.

        Raises:
            ValueError: ``seed`` is a list of another length than ``num_envs``, or ``reset_mask`` is
                invalid (gymnasium's checks; ``TypeError`` for its type) or given with async batches.
            AlreadyPendingCallError: An async call is in flight (gymnasium's).
            PortalError: The portal cannot continue after an earlier failure.
        """
        self._check_usable()
        seeds = seed_list(seed, self.num_envs)
        self._pending.check_idle("reset_async")
        options, mask = reset_options(options, self.num_envs, self.batched)
        if self._batches is not None:
            self._health.run(self._batches.reset, seeds, options)
        else:
            self._clock.enter()
            self._health.run(self._lockstep.reset, seeds, options, mask)
        self._pending.begin(AsyncState.WAITING_RESET)

    def reset_wait(self, timeout: Optional[float] = None) -> tuple[Any, dict[str, Any]]:
        """Results of ``reset_async``: every env's (lockstep) or the first batch (async batches).
        ``timeout`` (seconds) raises ``PortalTimeoutError``, also a ``multiprocessing.TimeoutError``
        as with AsyncVectorEnv (the portal cannot continue then).

        Raises:
            EnvError: An env raised, or gave a value that cannot be sent (see the class docstring).
            ServerDiedError: An env server exited.
            HostLostError: An env host stopped answering (hosts elsewhere, or placed by Ray).
            PortalTimeoutError: No results within ``step_timeout`` (or the wait's ``timeout``).
            ServerProtocolError: A server or host broke the protocol.
            RestartLimitError: An env failed again after ``max_restarts`` restarts.
            NoAsyncCallError: ``reset_async`` was not called (gymnasium's).
            PortalError: The portal cannot continue after an earlier failure.
        """
        self._check_usable()
        self._pending.check_waiting(AsyncState.WAITING_RESET)
        self._pending.end()
        if self._batches is not None:
            obs, _, _, _, infos = self._recv(self._batches, timeout)
            return obs, infos
        result = self._health.run(self._lockstep.reset_result, timeout)
        self._clock.leave()
        return result

    def step(self, actions: Any) -> StepResult:
        """Step every env once (lockstep), or ``send`` the last batch's envs and ``recv`` the next.

        Raises:
            EnvError: An env raised, or gave a value that cannot be sent (see the class docstring).
            ServerDiedError: An env server exited.
            HostLostError: An env host stopped answering (hosts elsewhere, or placed by Ray).
            PortalTimeoutError: No results within ``step_timeout`` (or the wait's ``timeout``).
            ServerProtocolError: A server or host broke the protocol.
            RestartLimitError: An env failed again after ``max_restarts`` restarts.
            TypeError: ``actions`` is a scalar where one action per env is due.
            ValueError: ``actions`` do not match ``num_envs`` envs of the action space.
            AlreadyPendingCallError: An async call is in flight (gymnasium's).
            PortalError: The portal cannot continue after an earlier failure.
        """
        self.step_async(actions)
        return self.step_wait()

    def step_async(self, actions: Any) -> None:
        """Start the step and return at once (async batches: ``send`` the last batch's envs).

        Raises:
            TypeError: ``actions`` is a scalar where one action per env is due, or holds a value that
                cannot be sent (nothing was sent then).
            ValueError: ``actions`` do not match the envs of the action space.
            AlreadyPendingCallError: An async call is in flight (gymnasium's).
            PortalError: The portal cannot continue after an earlier failure.
        """
        self._check_usable()
        self._pending.check_idle("step_async")
        self._clock.enter()
        if self._batches is not None:
            self._health.run(self._batches.send, actions, None)
        else:
            self._health.run(self._lockstep.step, actions)
        self._pending.begin(AsyncState.WAITING_STEP)

    def step_wait(self, timeout: Optional[float] = None) -> StepResult:
        """Results of ``step_async`` (async batches: the next ``recv``). ``timeout`` (seconds) raises
        ``PortalTimeoutError``, also a ``multiprocessing.TimeoutError`` as with AsyncVectorEnv; the
        portal cannot continue after it.

        Raises:
            EnvError: An env raised, or gave a value that cannot be sent (see the class docstring).
            ServerDiedError: An env server exited.
            HostLostError: An env host stopped answering (hosts elsewhere, or placed by Ray).
            PortalTimeoutError: No results within ``step_timeout`` (or the wait's ``timeout``).
            ServerProtocolError: A server or host broke the protocol.
            RestartLimitError: An env failed again after ``max_restarts`` restarts.
            NoAsyncCallError: ``step_async`` was not called (gymnasium's).
        """
        self._health.check_waitable(self.closed)
        self._pending.check_waiting(AsyncState.WAITING_STEP)
        self._pending.end()
        if self._batches is not None:
            return self._recv(self._batches, timeout)
        result = self._health.run(self._lockstep.step_result, timeout)
        self._clock.leave()
        return result

    # -- async batches (envpool's API) ---------------------------------------------------------
    def send(self, actions: Any, env_ids: Any = None) -> None:
        """Step ``env_ids`` (default: the last ``recv``'s) with ``actions``, batched along ``env_ids``,
        and return at once (async batches).

        Raises:
            ValueError: ``env_ids`` are not distinct env indices, name none (and no ``recv`` came
                before), or cover part of a server's envs; ``actions`` do not match them.
            TypeError: ``actions`` is a scalar where one action per env is due.
            AlreadyPendingCallError: Some of ``env_ids`` are still stepping or have results waiting
                (gymnasium's).
            PortalError: The portal steps in lockstep (``batch_size == num_envs``: use ``step``), or
                cannot continue after an earlier failure.
        """
        batches = self._require_batches("send")
        self._clock.enter()
        self._health.run(batches.send, actions, env_ids)

    def recv(self, timeout: Optional[float] = None) -> StepResult:
        """The next ``batch_size`` envs to finish: ``(obs, reward, terminated, truncated, infos)``,
        ``infos["env_id"]`` says which (async batches).

        Raises:
            EnvError: An env raised, or gave a value that cannot be sent (see the class docstring).
            ServerDiedError: An env server exited.
            HostLostError: An env host stopped answering (hosts elsewhere, or placed by Ray).
            PortalTimeoutError: No results within ``step_timeout`` (or the wait's ``timeout``).
            ServerProtocolError: A server or host broke the protocol.
            RestartLimitError: An env failed again after ``max_restarts`` restarts.
            NoAsyncCallError: Fewer than ``batch_size`` envs are stepping or finished (gymnasium's).
            PortalError: The portal steps in lockstep (``batch_size == num_envs``: use ``step``), or
                cannot continue after an earlier failure.
        """
        batches = self._require_batches("recv")
        if self._pending.state is AsyncState.WAITING_STEP:
            self._pending.end()
        return self._recv(batches, timeout)

    def _recv(self, batches: BatchDriver, timeout: Optional[float]) -> StepResult:
        self._clock.enter()
        result = self._health.run(batches.recv, timeout)
        self._clock.leave()
        return result

    def async_reset(self, seed: int | list[int | None] | None = None, options: dict[str, Any] | None = None) -> None:
        """Reset every env; ``recv()`` then hands out the reset batches (envpool's ``async_reset``:
        ``reset()`` with async batches is this followed by ``recv()``).

        Raises:
            ValueError: ``seed`` is a list of another length than ``num_envs``, or ``options`` holds a
                ``reset_mask`` (async batches reset every env).
            AlreadyPendingCallError: An async call is in flight (gymnasium's).
            PortalError: The portal steps in lockstep (``batch_size == num_envs``: use ``reset``), or
                cannot continue after an earlier failure.
        """
        batches = self._require_batches("async_reset")
        self._pending.check_idle("async_reset")
        options, _ = reset_options(options, self.num_envs, True)
        self._health.run(batches.reset, seed_list(seed, self.num_envs), options)

    # -- per-env calls, on the two primitives ----------------------------------------------------
    def _route(self, env_ids: Any) -> tuple[list[int], dict[int, list[int]]]:
        """(the env ids, checked; owner index -> the ids it holds, in their order), owners ascending."""
        owners = self._calls.owners()
        if env_ids is None:
            return [i for envs in owners for i in envs], {j: list(envs) for j, envs in enumerate(owners)}
        ids = check_env_ids(env_ids, self.num_envs)
        owner_of = {i: j for j, envs in enumerate(owners) for i in envs}
        chosen: dict[int, list[int]] = {}
        for i in ids:
            chosen.setdefault(owner_of[i], []).append(i)
        return ids, dict(sorted(chosen.items()))

    def _ask(
        self, op: str, fields: dict[str, Any], env_ids: Any, what: str, values: Optional[list[Any]] = None
    ) -> None:
        """Post ``op`` to the owners of ``env_ids`` (None: every env, each owner's whole share)."""
        self._check_usable()
        self._pending.check_idle(what)
        ids, chosen = self._route(env_ids)
        value_of = dict(zip(ids, values)) if values is not None else {}
        requests = {}
        for j, envs in chosen.items():
            part = dict(fields)
            if values is not None:
                part["values"] = [value_of[i] for i in envs]
            requests[j] = Request(op, None if env_ids is None else envs, part)
        self._health.run(self._calls.post, requests, what)
        self._asked = Asked(op, what, ids, chosen)
        self._pending.begin(AsyncState.WAITING_CALL)

    def _answers(self, timeout: Optional[float]) -> tuple[Any, ...]:
        """The values of the call ``_ask`` posted, in the caller's order of envs."""
        asked, self._asked = self._asked, None
        self._pending.end()
        assert asked is not None
        values = self._health.run(self._calls.collect, asked.what, timeout)
        if asked.op in SILENT:
            return ()
        order = [i for envs in asked.chosen.values() for i in envs]
        if len(values) != len(order):
            raise ServerProtocolError(f"{asked.what} got {len(values)} values for {len(order)} envs")
        by_env = dict(zip(order, values))
        return tuple(by_env[i] for i in asked.ids)

    def _ask_and_wait(
        self, op: str, fields: dict[str, Any], env_ids: Any, what: str, values: Optional[list[Any]] = None
    ) -> tuple[Any, ...]:
        self._ask(op, fields, env_ids, what, values)
        return self._answers(None)

    @staticmethod
    def _callable(name: str) -> str:
        if name in NOT_CALLABLE:  # as AsyncVectorEnv refuses them
            raise ValueError(f"Trying to call function `{name}` with `call`, use `{name}` directly instead.")
        return name

    def call(self, name: str, *args: Any, **kwargs: Any) -> tuple[Any, ...]:
        """Call ``name`` on every env (or read it, when it is not callable); one result per env.

        Raises:
            EnvError: An env raised (``AttributeError`` too, for an attribute it lacks); the portal goes on.
            HostPolicyError: An env host does not allow ``name`` (``portal-shm host --calls``).
            ServerDiedError: An env server exited (with ``on_env_failure="restart"`` it is restarted).
            PortalTimeoutError: An owner did not answer in time.
            ServerProtocolError: An owner broke the protocol.
            AlreadyPendingCallError: An async call is in flight (gymnasium's).
            PortalError: The portal cannot continue after an earlier failure.
            ValueError: ``name`` is ``reset``, ``step`` or ``close``, which have methods of their own.
            TypeError: An argument cannot be sent (nothing was sent then).
        """
        self.call_async(name, *args, **kwargs)
        return self.call_wait()

    def call_async(self, name: str, *args: Any, **kwargs: Any) -> None:
        """Start ``call(name, ...)`` on every env and return at once; ``call_wait`` collects the results."""
        fields = {"name": self._callable(name), "args": list(args), "kwargs": kwargs}
        self._ask("call", fields, None, f"call({name!r})")

    def call_wait(self, timeout: Optional[float] = None) -> tuple[Any, ...]:
        """Results of ``call_async``, one per env; ``timeout`` as for ``step_wait``."""
        self._check_usable()
        self._pending.check_waiting(AsyncState.WAITING_CALL)
        return self._answers(timeout)

    def call_envs(self, env_ids: Any, name: str, *args: Any, **kwargs: Any) -> tuple[Any, ...]:
        """``call`` in the envs ``env_ids`` only (SB3's ``env_method(..., indices=)``): their results,
        in the order of ``env_ids``; the other envs' owners are not even woken.

        Raises:
            ValueError: ``env_ids`` are not distinct env indices of the portal, or ``name`` is
                ``reset``, ``step`` or ``close``.
            TypeError: ``env_ids`` are not ints, or an argument cannot be sent.
            EnvError: The env raised; the portal goes on. Otherwise as ``call``.
        """
        fields = {"name": self._callable(name), "args": list(args), "kwargs": kwargs}
        return self._ask_and_wait("call", fields, env_ids, f"call({name!r})")

    def get_attr(self, name: str) -> tuple[Any, ...]:
        """Each env's attribute ``name``.

        Raises:
            EnvError: An env raised (``AttributeError`` too, for an attribute it lacks); the portal goes on.
            HostPolicyError: An env host does not allow ``name`` (``portal-shm host --calls``).
            ServerDiedError: An env server exited (with ``on_env_failure="restart"`` it is restarted).
            PortalTimeoutError: An owner did not answer in time.
            ServerProtocolError: An owner broke the protocol.
            AlreadyPendingCallError: An async call is in flight (gymnasium's).
            PortalError: The portal cannot continue after an earlier failure.
        """
        return self._ask_and_wait("get_attr", {"name": name}, None, f"get_attr({name!r})")

    def get_attr_envs(self, env_ids: Any, name: str) -> tuple[Any, ...]:
        """``get_attr`` of the envs ``env_ids`` only, in their order.

        Raises:
            ValueError: ``env_ids`` are not distinct env indices of the portal.
            TypeError: ``env_ids`` are not ints.
            EnvError: The env raised (``AttributeError`` too, for an attribute it lacks); the portal
                goes on. Otherwise as ``get_attr``.
        """
        return self._ask_and_wait("get_attr", {"name": name}, env_ids, f"get_attr({name!r})")

    def set_attr(self, name: str, values: list[Any] | tuple[Any, ...] | Any) -> None:
        """Set ``name`` in every env: one value for all, or a list or tuple of one per env.

        Raises:
            EnvError: An env raised setting it (a property without a setter, say); the portal goes on.
            HostPolicyError: An env host does not allow ``name`` (``portal-shm host --calls``).
            ServerDiedError: An env server exited (with ``on_env_failure="restart"`` it is restarted).
            PortalTimeoutError: An owner did not answer in time.
            ServerProtocolError: An owner broke the protocol.
            AlreadyPendingCallError: An async call is in flight (gymnasium's).
            PortalError: The portal cannot continue after an earlier failure.
            ValueError: ``values`` is a list or tuple of another length than ``num_envs``.
            TypeError: A value cannot be sent (nothing was sent then).
        """
        values = per_env_values(values, self.num_envs)
        self._ask_and_wait("set_attr", {"name": name}, None, f"set_attr({name!r})", values)

    def set_attr_envs(self, env_ids: Any, name: str, values: list[Any] | tuple[Any, ...] | Any) -> None:
        """``set_attr`` in the envs ``env_ids`` only: one value for all, or one per env named.

        Raises:
            ValueError: ``env_ids`` are not distinct env indices of the portal, or ``values`` is a list
                or tuple of another length than ``env_ids``.
            TypeError: ``env_ids`` are not ints, or a value cannot be sent.
            EnvError: The env raised; the portal goes on. Otherwise as ``set_attr``.
        """
        count = len(check_env_ids(env_ids, self.num_envs))
        self._ask_and_wait("set_attr", {"name": name}, env_ids, f"set_attr({name!r})", per_env_values(values, count))

    def render(self) -> tuple[Any, ...]:
        """Each env's ``render()`` result, as SyncVectorEnv returns them."""
        return self._ask_and_wait("render", {}, None, "render")

    def record_frames(self, env_ids: Any, on: bool = True) -> None:
        """Turn frame capture on (or off) in the envs ``env_ids``: while on, each of their steps renders
        on its own server after the step and the frame rides in the env's info (``RecordVideo``
        takes it out again); the other envs never render. Needs ``render_mode="rgb_array"``."""
        self._ask_and_wait("record", {"on": bool(on)}, env_ids, "record_frames")

    def record_frames_shared(self, env_ids: Sequence[int], rings: Sequence[Any], next_frames: Sequence[int]) -> None:
        """``record_frames(env_ids, True)`` with frames written into shared frame rings; only for
        portals whose servers map the agent's memory (``maps_agent_memory``)."""
        raise NotImplementedError(f"{type(self).__name__}'s servers do not map this agent's memory: use record_frames")

    def get_state(self, env_ids: Any, allow_pickle: bool = False) -> list[bytes]:
        """The state of each env of ``env_ids``, as opaque bytes (``portal_shm.server.state``): a
        versioned msgpack blob made in the env's runtime, restorable into any env of the same id
        and versions (another server, container or host). ``allow_pickle``: envs with no state
        adapter are pickled inside their runtime (the agent never unpickles anything; an env host
        allows it only with ``portal-shm host --pickled-states``).

        Raises:
            EnvError: An env's state cannot be taken in its runtime (no state adapter fits it and
                ``allow_pickle`` is False, or its host does not allow pickled states); the message
                says what would work. Otherwise as ``get_attr``.
            ServerProtocolError: An owner answered with something that is not bytes.
            ValueError: ``env_ids`` are not distinct env indices of the portal (``TypeError``: not ints).
        """
        states = list(self._ask_and_wait("get_state", {"allow_pickle": bool(allow_pickle)}, env_ids, "get_state"))
        if not all(isinstance(state, bytes) for state in states):
            raise ServerProtocolError("an env's owner answered get_state with something that is not bytes")
        return states

    def set_state(self, states: Any, env_ids: Any, allow_pickle: bool = False) -> tuple[Any, dict[str, Any]]:
        """Restore ``states`` (from ``get_state``) into the envs ``env_ids``, one each (a state may go
        to several envs: a fork); returns every env's observation, as a masked reset does (the
        others' unchanged), and the restored envs' infos. Their episodes go on from the state.
        ``allow_pickle``: accept states the env's runtime pickled (unpickling there runs code).

        Raises:
            ValueError: ``states`` are not one state (bytes) per env of ``env_ids``, or ``env_ids`` are
                not distinct env indices of the portal.
            EnvError: A state does not fit its env (another env or version made it, or it was pickled
                and ``allow_pickle`` is False). Otherwise as ``reset``.
            PortalError: The portal steps in async batches (restore states in a lockstep portal), or
                cannot continue after an earlier failure.
        """
        ids = check_env_ids(env_ids, self.num_envs)
        states = list(states)
        if len(states) != len(ids) or not all(isinstance(state, bytes) for state in states):
            raise ValueError(f"set_state takes one state (bytes, from get_state) per env: {len(states)} for {len(ids)}")
        if self.batched:
            raise PortalError(
                "set_state is for lockstep portals: with batch_size the envs are in different slots of "
                "the ring; make the portal without batch_size to restore states"
            )
        self._check_usable()
        self._pending.check_idle("set_state")
        return self._health.run(self._lockstep.restore, dict(zip(ids, states)), bool(allow_pickle))

    # AsyncVectorEnv's properties, not VectorEnv's (one seed and Generator of the vector env, which
    # can also be set): their signatures cannot match the base class's.
    @property
    def np_random_seed(self) -> tuple[Any, ...]:  # type: ignore[override]
        """Each env's ``np_random_seed``, as AsyncVectorEnv returns it."""
        return self.get_attr("np_random_seed")

    @property  # type: ignore[misc]
    def np_random(self) -> tuple[Any, ...]:  # type: ignore[override]
        """Each env's ``np_random`` as AsyncVectorEnv returns it, where the values can be sent (they
        cannot: a Generator is not data, so this raises an ``EnvError`` saying so)."""
        return self.get_attr("np_random")
