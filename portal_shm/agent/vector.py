"""VectorPortal: a gymnasium ``VectorEnv`` whose envs live in isolated runtimes.

Data path of one step: the agent writes the actions into ring slot ``k``, writes ``STEP k`` into
each server's mailbox and rings its doorbell; each server steps its envs and writes observations,
rewards, flags and an infos blob into row ``i`` of slot ``k``, then rings back. The observations
handed to the client are fresh arrays copied out of slot ``k`` (``copy=True``, the default): the
one copy of the whole path, and what the client keeps never changes under it.

``copy=False`` hands out views of one ring slot instead, valid until ``ring_depth - 1`` further
calls of ``step``/``reset`` have returned; the next call after that writes the same slot again.
That is for code that copies each batch into storage of its own at once (a rollout buffer); a
view still referenced when its slot is about to be written again is reported once
(``KeptViewWarning``, ``agent/contract/kept_views.py``). The views are writable, as
AsyncVectorEnv's ``copy=False`` arrays are: a write changes only the slot, which the servers
write again later.
"""

from __future__ import annotations

import os
import secrets
import weakref
from dataclasses import replace
from typing import Any, Callable, Optional, Sequence, Union

from gymnasium import logger
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from ..errors import PortalError
from ..runtimes.backend import Backend
from ..wire.doorbell import Waiter
from ..wire.frames import FrameRing
from ..wire.layout import ring_layout
from .contract.base import PortalVectorEnv
from .contract.checks import check_env_ids
from .contract.drivers import StepResult
from .contract.options import DEFAULT_RING_DEPTH, RecyclePolicy, VectorOptions
from .contract.pending import PendingCall
from .local.batch_driver import RingBatches
from .local.env_fns import check_options, check_shared_memory, to_specs
from .local.failure import failure_policy
from .local.health import Health
from .local.lockstep import Lockstep
from .local.portal_spaces import ObservationMode, check_observation_mode, portal_spaces
from .local.replies import ControlCalls
from .local.ring_views import RingViews
from .local.server_groups import plan_groups
from .local.session import PortalSession
from .local.spec import EnvSpec
from .local.spin import default_spin_wait, server_spin
from .local.stats_reader import StatsReader
from .recycle.recycler import Recycler
from .stats.clock import WINDOW_S, AgentClock
from .stats.publish import Publisher


# ``VectorEnv`` named again among the direct bases (it is PortalVectorEnv's already): libraries
# that tell a gymnasium vector env by ``type(env).__bases__`` (skrl's ``wrap_env``) then see one.
class VectorPortal(PortalVectorEnv, VectorEnv):
    """Steps envs that live in other runtimes as one batched gymnasium ``VectorEnv``.

    A drop-in for ``gymnasium.vector.AsyncVectorEnv``: ``VectorPortal(env_fns, ...)`` takes the same
    arguments (see ``portal_shm.agent.local.env_fns`` for how the factories reach the env runtimes).

    Args:
        env_fns: one entry per env: a callable that makes it (a lambda, closure, ``functools.partial``
            or class, as for AsyncVectorEnv; shipped with cloudpickle to ``backend``) or an
            ``EnvSpec`` naming an env id or entry point (``make_vec`` builds these for you).
            Consecutive envs of one backend share env servers, ``envs_per_server`` each.
        shared_memory: with factories, as AsyncVectorEnv: True refuses observation spaces gymnasium
            cannot keep in shared memory (custom spaces, Graph, Sequence) with its errors; False
            serves them, their values travelling beside the ring. ``EnvSpec`` lists always serve
            them. Fixed-layout values live in the ring either way.
        copy: True (default, as AsyncVectorEnv) returns fresh arrays every call; False returns
            (writable) ring views, valid for ``ring_depth - 1`` further calls (see the module
            docstring), for code that copies each batch into its own storage at once.
        context: accepted for AsyncVectorEnv code and ignored: env servers are always fresh
            processes (like the "spawn" start method) that exit when the agent does.
        daemon: accepted for AsyncVectorEnv code and ignored, as ``context``.
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
            get, are in ``portal_shm.agent.local.recovery``.
        max_restarts: restarts allowed per env over the portal's life with ``"restart"``; the
            next failure raises ``RestartLimitError``.
        spin_wait: seconds the agent watches the ring for its servers before it sleeps on their
            doorbell pipes (servers watch for its next command up to four times as long), the
            core yielded at every turn, each side only while that has been paying; 0 never spins.
            Default: ``portal_shm.agent.local.spin.default_spin_wait()``.
        max_ring_bytes: the largest ring the envs' spaces may ask for (None: no cap), checked once
            their servers said their spaces and before the ring is made: an env host serving
            untrusted envs sets it (``portal-shm host --max-ring-bytes``).
        recycle: replace servers by warm spares at episode ends, trajectories unchanged, e.g.
            ``{"episodes": 500, "rss_mb": 2048, "seconds": 3600, "slowdown": 3.0, "jitter": 0.1}``
            (any subset of the rules; also ``wait_steps`` and ``max_per_step``): see
            ``portal_shm.agent.recycle.wear`` for the rules and ``portal_shm.agent.recycle.recycler`` for
            the swap. Lockstep portals only.
        infos: what becomes of info values msgpack cannot carry exactly (enum members,
            namedtuples, sets, dataclasses, object or datetime64 arrays...) from runtimes that are
            a trust boundary (docker, attach): ``"exact"`` (default) refuses them with an
            ``InfoEncodingError`` naming env, key and type; ``"lossy"`` converts them (an enum
            member to its value, a namedtuple to a tuple, anything else to its repr()). Process,
            venv and micromamba runtimes carry them exactly either way (``docs/concepts/infos.md``).
        server_start: ``"fork"`` (default): where two or more servers of one kind (backend, env
            and envs per server) start on a backend whose servers are processes of this machine
            (process, venv, micromamba), one zygote of that runtime makes the envs once and forks
            every server from it: they share its pages copy-on-write and start in milliseconds,
            each still a process of its own (``portal_shm.agent.local.zygotes``). Envs that start
            threads or processes as they are made are closed in the zygote, and once those ended
            each fork makes its own envs; where something still runs, that is warned once and
            their servers start fresh. ``"fresh"``: every server a new interpreter.
    """

    _lockstep: Lockstep
    _batches: Optional[RingBatches]
    _calls: ControlCalls
    _health: Health
    _clock: AgentClock

    def __init__(
        self,
        env_fns: Sequence[Union[EnvSpec, Callable[[], Any]]],
        *,
        shared_memory: bool = True,
        copy: bool = True,
        context: Optional[str] = None,
        daemon: bool = True,
        worker: Optional[Callable[..., Any]] = None,
        observation_mode: ObservationMode = "same",
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
        recycle: Optional[Union[dict[str, Any], RecyclePolicy]] = None,
        max_ring_bytes: Optional[int] = None,
        infos: str = "exact",
        server_start: str = "fork",
    ) -> None:
        check_options(context, worker, max_concurrency)
        specs, self._gymnasium_form = to_specs(env_fns, backend)
        check_observation_mode(observation_mode)
        self.options = VectorOptions.of(
            len(specs),
            {
                "autoreset_mode": autoreset_mode,
                "batch_size": batch_size,
                "envs_per_server": envs_per_server,
                "ring_depth": ring_depth,
                "info_capacity": info_capacity,
                "startup_timeout": startup_timeout,
                "step_timeout": step_timeout,
                "on_env_failure": on_env_failure,
                "max_restarts": max_restarts,
                "recycle": recycle,
                "spin_wait": spin_wait,
                "max_ring_bytes": max_ring_bytes,
                "infos": infos,
                "server_start": server_start,
            },
        )
        if self.options.spin_wait is None:  # resolved once, here: what the drivers and the servers get
            self.options = replace(self.options, spin_wait=default_spin_wait())
        self.observation_mode = observation_mode
        self.env_fns = list(env_fns)
        self.shared_memory, self.context, self.daemon, self.worker = shared_memory, context, daemon, worker
        self.max_concurrency = max_concurrency
        self.num_envs = len(specs)
        self.autoreset_mode = self.options.autoreset_mode
        self.batch_size = self.num_envs if batch_size is None else int(batch_size)
        groups = plan_groups(
            specs,
            envs_per_server,
            batch_size=self.batch_size if self.batched else None,
            max_concurrency=max_concurrency,
            stacklevel=3,  # (the caller of make_vec, as batch_grouping's stacklevel=4 named it)
        )
        self.copy = bool(copy)
        self.closed = False
        self._pending = PendingCall()
        bases = {spec.backend.run_dir_base() for spec in specs}
        if len(bases) > 1:
            raise ValueError(
                f"these backends need their run directories in different places: {sorted(map(str, bases))}"
            )
        self._session = PortalSession(bases.pop(), lossy_infos=self.options.infos == "lossy")
        self._health = Health(self._session, self._gymnasium_form)
        self._finalizer = weakref.finalize(self, self._session.shutdown)
        try:
            self._session.launch(specs, groups, startup_timeout, fork=self.options.server_start == "fork")
            self._ring = self._attach(specs, startup_timeout, info_capacity)
            self._health.watch(self._ring)
            self._compose(self.options)
        except BaseException:
            self._finalizer()
            self.closed = True
            raise

    def _compose(self, options: VectorOptions) -> None:
        """The parts that drive the servers, once the ring is attached: recovery and the recycler,
        control calls, the lockstep or async-batch driver, the clock, stats and top's report."""
        startup_timeout, step_timeout = options.startup_timeout, options.step_timeout
        servers = self._session.servers
        self._recovery = failure_policy(
            options.on_env_failure,
            self._session,
            self._ring,
            self.autoreset_mode,
            step_timeout,
            options.max_restarts,
            startup_timeout,
        )
        self._recycler = (
            None
            if options.recycle is None
            else Recycler(
                self._session,
                self._ring,
                self._recovery,
                options.recycle,
                self.autoreset_mode,
                step_timeout,
                startup_timeout,
            )
        )
        self._batches = None
        if self.batched:
            if self._ring.actions is None:
                raise ValueError(
                    f"batch_size needs an action space with a fixed layout, not {self.single_action_space}: "
                    "async batches write actions into the ring"
                )
            self._batches = RingBatches(
                servers,
                self._ring,
                self._recovery,
                self._health,
                self.batch_size,
                copy=self.copy,
                spin_wait=self.spin_wait,
            )
        self._calls = ControlCalls(
            servers,
            self._recovery,
            self._health,
            self.num_envs,
            None if self._batches is None else self._batches.settle,
        )
        self._lockstep = Lockstep(
            servers,
            self._ring,
            self._recovery,
            self._health,
            self._calls,
            self.action_space,
            copy=self.copy,
            spin_wait=self.spin_wait,
            loose_actions=self._gymnasium_form,
            recycler=self._recycler,
        )
        self._clock = AgentClock()
        self._stats = StatsReader(
            self._ring.stats_views,
            servers,
            self._clock,
            lambda: self._recovery.restarts,
            self._ring.env_step_bytes,
            lambda: self.recycles,
        )
        self._publisher = Publisher(
            self._session.resources.run_dir, self._describe, lambda: self._stats.report(WINDOW_S)
        )
        self._clock.on_tick = self._tick

    # -- the options, read from ``self.options`` (their one copy) -------------------------------------
    @property
    def ring_depth(self) -> int:
        """Batches the ring holds: a returned view survives ``ring_depth - 1`` further calls."""
        return self.options.ring_depth

    @property
    def step_timeout(self) -> Optional[float]:
        return self.options.step_timeout

    @property
    def spin_wait(self) -> float:
        """Seconds the agent watches the ring before it sleeps (resolved: never None)."""
        assert self.options.spin_wait is not None
        return self.options.spin_wait

    @property
    def max_ring_bytes(self) -> Optional[int]:
        return self.options.max_ring_bytes

    def _check_ring(self, layout: dict[str, Any]) -> None:
        if self.max_ring_bytes is not None and int(layout["size"]) > self.max_ring_bytes:
            raise PortalError(
                f"the envs' spaces need a ring of {int(layout['size']):,} bytes ({self.num_envs} envs x ring_depth "
                f"{self.ring_depth}), more than max_ring_bytes={self.max_ring_bytes:,} (on an env host: portal-shm "
                "host --max-ring-bytes)"
            )

    def _attach(self, specs: list[EnvSpec], timeout: float, info_capacity: int) -> RingViews:
        """The portal's spaces from the servers' hellos, then the ring they all attach to."""
        session = self._session
        obs_schemas = [s for server in session.servers for s in server.schemas("observation_spaces")]
        act_schemas = [s for server in session.servers for s in server.schemas("action_spaces")]
        if self.max_ring_bytes is not None:  # before gymnasium builds the spaces (a Box's bounds are arrays)
            self._check_ring(
                ring_layout(obs_schemas[0], act_schemas[0], self.num_envs, self.ring_depth, 1, info_capacity)
            )
        spaces = portal_spaces(
            obs_schemas, act_schemas, self.observation_mode, specs[0].factory if self._gymnasium_form else None
        )
        self.single_observation_space, self.single_action_space = (
            spaces.single_observation_space,
            spaces.single_action_space,
        )
        if self._gymnasium_form and self.shared_memory:
            check_shared_memory(self.single_observation_space)
        self.observation_space, self.action_space = spaces.observation_space, spaces.action_space
        if self.batched:
            self.observation_space = batch_space(self.single_observation_space, self.batch_size)
            self.action_space = batch_space(self.single_action_space, self.batch_size)
        first = session.servers[0].hello
        self.metadata = dict(first.get("metadata") or {})
        self.metadata["autoreset_mode"] = self.autoreset_mode
        self.render_mode = first.get("render_mode")
        layout = ring_layout(
            spaces.obs_schema, spaces.act_schema, self.num_envs, self.ring_depth, len(session.servers), info_capacity
        )
        self._check_ring(layout)
        settings = {
            "autoreset_mode": self.autoreset_mode.value,
            "observation_schema": spaces.obs_schema,
            "action_schema": spaces.act_schema,
            "spin": server_spin(self.spin_wait, len(session.servers)),
            # lockstep restarts resume from the envs' episode-end states (``local/recovery.py``)
            "end_states": self.options.on_env_failure == "restart" and not self.batched,
            # it reads a server's infos as columns (one blob for all its envs: ``RingViews.gather``)
            "columns": True,
        }
        ring = session.attach(layout, settings, timeout)
        views = RingViews(
            ring.views,
            spaces.obs_schema,
            spaces.act_schema,
            self.single_observation_space,
            self.single_action_space,
            self.ring_depth,
            info_capacity,
            # whose infos may hold pickles: servers whose runtime is no trust boundary (``wire/info_codec.py``)
            [spec.backend.trust_boundary() is None for spec in specs],
        )
        if self.copy and not self.batched:  # (async batches hand out rows of several slots: copies)
            views.use_private_slots(ring.fd, layout)
        return views

    maps_agent_memory = True

    def record_frames_shared(
        self, env_ids: Sequence[int], rings: Sequence[FrameRing], next_frames: Sequence[int]
    ) -> None:
        """``record_frames(env_ids, True)`` with each env's frames going into its own frame ring
        (``portal_shm.wire.frames``: ``rings[k]`` for ``env_ids[k]``, its next frame numbered
        ``next_frames[k]``) instead of its info. The rings' descriptors reach the servers as the
        main ring's did, whatever their backend (processes, venvs, containers); a server too old
        to know frame rings ignores them and sends its frames in the infos as before."""
        ids = check_env_ids(env_ids, self.num_envs)
        if len(rings) != len(ids) or len(next_frames) != len(ids):
            raise ValueError(f"record_frames_shared takes one ring and one frame number per env, for {len(ids)} envs")
        offer = self._session.offer()
        tokens, entries = [], []
        try:
            for ring, next_frame in zip(rings, next_frames):
                assert ring.fd is not None, "a frame ring the agent made holds its descriptor"
                token = secrets.token_hex(16)
                offer.expect(token, [os.dup(ring.fd)])
                tokens.append(token)
                entries.append(
                    {
                        "path": offer.path,
                        "token": token,
                        "shape": list(ring.shape),
                        "depth": ring.depth,
                        "next": int(next_frame),
                    }
                )
            self._ask_and_wait("record", {"on": True}, ids, "record_frames", entries)
        finally:
            for token in tokens:  # a server that did not fetch its ring (refused, or too old): closed here
                offer.forget(token)

    def batch_ready(self) -> bool:
        """Whether ``recv`` would return at once: enough servers finished for a batch."""
        self._require_batches("batch_ready")
        assert self._batches is not None
        return self._batches.ready()

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
        if getattr(self, "_ring", None) is not None and self._ring.private is not None:
            self._ring.private.close()

    # -- for a driver outside this portal's thread (an env host's router steps lockstep itself) --------
    def doorbells(self) -> list[Waiter]:
        """The servers' done pipes (``Waiter``s, their ``fd`` to poll): readable when a server rang back."""
        return [server.done for server in self._session.servers]

    def step_finished(self, readable: Any) -> Optional[bool]:
        """After ``step_async``, never waiting: whether every server finished (None: ``step_wait``
        must finish the step: a pipe closed, or a restart is due); see ``Lockstep.step_finished``."""
        return self._lockstep.step_finished(readable)

    def awaited_messages(self) -> list[Any]:
        """The control sockets (to poll) of servers that finished the step ``step_finished`` last
        looked at but whose promised message was not there yet (it is on its way: sent first)."""
        return list(self._lockstep.awaited)

    def step_wait_now(self) -> StepResult:
        """``step_wait`` once ``step_finished`` said True, for a driver that may never wait: raises
        ``NotFinished`` for a server that went back on it (its env rewrote its status word)."""
        self._lockstep.no_wait = True
        try:
            return self.step_wait()
        finally:
            self._lockstep.no_wait = False

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
        return self._recovery.pending

    def stats(self, window: float = WINDOW_S) -> dict[str, Any]:
        """Where the time goes, over the last ``window`` seconds (and ``since_start``): env steps/s,
        per env its server-measured step latency (p50/p90/p99 µs, sampled), episodes, resets and
        restarts; per server its rate, busy share, CPU share and RSS; the agent's share of time
        inside portal calls and away from them; ring bytes/s; and the bottleneck verdict
        (``bound``: see ``portal_shm.agent.stats.bound`` for its rules). Reading costs the servers nothing."""
        self._check_usable()
        return self._stats.report(window)

    def _tick(self) -> None:
        """Once a second, from the portal's own calls: a snapshot for ``stats``, a report for ``top``."""
        self._stats.keep()
        self._publisher.tick()

    def _describe(self) -> dict[str, Any]:
        first = self._session.servers[0].spec if self._session.servers else None
        return {
            "kind": "local",
            "env_id": None if first is None else first.id,
            "num_envs": self.num_envs,
            "batch_size": self.batch_size,
            "tag": self.tag,
            "servers": self.servers,
        }

    @property
    def restarts(self) -> list[int]:
        """How many times each env's episode was ended by a restart of its server: each one shown once
        as ``info["env_restarted"]`` (in a step's infos or a reset's); see ``portal_shm.agent.local.recovery``."""
        return list(self._recovery.restarts)

    @property
    def restart_log(self) -> list[dict[str, Any]]:
        """Every restart of a server, oldest first: ``envs``, ``phase`` (where its failure was found:
        ``step``, ``reset``, ``call``, or ``recycle`` for a recycled server's fresh one restarted in
        place), ``cause``, ``counted`` (in ``restarts``), ``attempts`` (fresh servers started for it)
        and ``shown`` (where ``env_restarted`` reached the infos: ``step``, ``reset``, ``batch``; None
        not yet, or never for a restart not counted)."""
        return [record.as_dict() for record in self._recovery.log]

    @property
    def recycles(self) -> list[int]:
        """How many times each env's server was recycled (``recycle``)."""
        return [0] * self.num_envs if self._recycler is None else list(self._recycler.recycles)

    @property
    def raw_infos(self) -> bool:
        """Infos as the env returned them instead of batched (``Portal``, the one-env wrapper, sets it)."""
        return self._ring.raw_infos

    @raw_infos.setter
    def raw_infos(self, value: bool) -> None:
        self._ring.raw_infos = bool(value)

    @property
    def servers(self) -> list[dict[str, Any]]:
        """Where each env lives: server index, env indices, runtime description, the server's
        process id on this host (a container's init process; None where unknown, e.g. remote) and
        what steps its envs (``hosting``: ``per-env``, or a native vector env such as
        ``ale_py.AtariVectorEnv``; None from older servers)."""
        return [
            {
                "server": s.index,
                "envs": list(s.env_indices),
                "runtime": s.handle.describe(),
                "pid": s.handle.host_pid(),
                "hosting": (s.hello or {}).get("hosting"),
            }
            for s in self._session.servers
            if s.handle is not None
        ]

    @property
    def tag(self) -> str:
        """``psm-<pid>-<token>``: the name of this portal's run directory, memfd and containers."""
        return self._session.resources.tag

    def __repr__(self) -> str:
        return f"VectorPortal({self._session.servers[0].spec.id if self._session.servers else '?'}, num_envs={self.num_envs})"
