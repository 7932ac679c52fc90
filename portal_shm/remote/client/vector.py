"""``RemoteVectorPortal``: a gymnasium VectorEnv whose envs live on env hosts on other machines.

A composition, as the local portal is: ``Hosts`` (the sessions with the hosts, where its
``Placement`` says they are), ``HostArrays`` (the messages' arrays, checked against the spaces
the hosts announced), ``Exchange`` (one request per host and the replies, with ``HostRecovery``
of lost hosts), and the drivers the contract (``PortalVectorEnv``) calls: ``RemoteLockstep``,
``RemoteBatches``, ``HostCalls`` (per-env requests to the hosts that own the envs) and
``HostsHealth``.

Results are exactly a local portal's (and so SyncVectorEnv's): the hosts run the same local
portal, observations and flags cross as raw bytes, and infos are batched once, here, over all
envs in order (``infos.py``).
"""

from __future__ import annotations

from typing import Any, Optional

from gymnasium import logger
from gymnasium.vector import VectorEnv
from gymnasium.vector.utils import batch_space

from ...agent.contract.base import PortalVectorEnv
from ...agent.contract.options import HOSTED, VectorOptions
from ...agent.contract.pending import PendingCall
from ...agent.contract.spaces import schema_to_space
from ...agent.stats.clock import WINDOW_S, AgentClock, ClockHistory, check_window
from ...errors import PortalError
from .. import frames
from ..messages import HELLO, STATS
from .backend import LinkOptions, RemoteBackend
from .batches import RemoteBatches
from .calls import HostCalls
from .exchange import Exchange
from .failure import failure_policy
from .health import HostsHealth
from .host_arrays import HostArrays
from .hosts import Hosts
from .lockstep import RemoteLockstep
from .placement import FixedHosts, Placement
from .stats import host_part, merge


# ``VectorEnv`` among the direct bases, as ``VectorPortal``'s (skrl's ``wrap_env`` looks there).
class RemoteVectorPortal(PortalVectorEnv, VectorEnv):
    """``num_envs`` copies of env ``env_id`` spread over the hosts of ``backend``.

    ``vector_kwargs`` are VectorPortal's (``autoreset_mode``, ``batch_size``, ``step_timeout``,
    ``on_env_failure``, ...): checked here (``VectorOptions``), applied by each host to its local
    portal. ``placement``: where the hosts are (default: those a ``RemoteBackend`` names).
    """

    def __init__(
        self,
        env_id: str,
        num_envs: int,
        backend: LinkOptions,
        env_kwargs: Optional[dict[str, Any]] = None,
        copy: bool = True,
        placement: Optional[Placement] = None,
        **vector_kwargs: Any,
    ) -> None:
        backend.check()  # type: ignore[attr-defined]
        if placement is None:
            if not isinstance(backend, RemoteBackend):
                raise TypeError(f"a {type(backend).__name__} needs its placement: pass placement=")
            placement = FixedHosts(backend)
        self.backend = backend
        self.placement = placement
        self.num_envs = num_envs
        self.copy = copy
        self.closed = False
        self._pending = PendingCall()
        self._closed_servers: list[Any] = []  # what ``servers`` says once closed
        self.options = options = self._checked_options(num_envs, vector_kwargs)
        self.autoreset_mode = options.autoreset_mode
        self.batch_size = options.batch_size or num_envs
        self.step_timeout = options.step_timeout
        vector = {k: v for k, v in vector_kwargs.items() if k != "batch_size" or v != num_envs}  # (lockstep)
        if "autoreset_mode" in vector:
            vector["autoreset_mode"] = self.autoreset_mode.value
        hello = {
            "cmd": HELLO,
            "protocol": frames.PROTOCOL,
            "env_id": env_id,
            "env_kwargs": env_kwargs or {},
            "runtime": backend.runtime,
            "runtime_options": dict(backend.runtime_options),
            "vector": vector,
        }
        self._hosts = Hosts(placement, backend, hello)
        self._health = HostsHealth(self._hosts)
        self._clock = AgentClock()
        try:
            self._start(self._hosts.connect(num_envs, float(options.startup_timeout)))
        except BaseException:
            self.close()
            raise
        self._clock_history = ClockHistory(self._clock)

    def _checked_options(self, num_envs: int, vector_kwargs: dict[str, Any]) -> VectorOptions:
        """The options checked here, before any host is asked (each host checks them again, under
        its own bounds: an agent that skips this is refused there)."""
        return VectorOptions.of(num_envs, vector_kwargs, allowed=HOSTED)

    def _start(self, welcomes: list[dict[str, Any]]) -> None:
        """The spaces, metadata and parts, from the hosts' welcomes."""
        hosts, options = self._hosts, self.options
        obs_schema, act_schema = Hosts.spaces(welcomes, hosts.hosts)
        last = welcomes[-1]
        metadata = last.get("metadata")
        self.metadata = {**(metadata if isinstance(metadata, dict) else {}), "autoreset_mode": self.autoreset_mode}
        self.render_mode = last.get("render_mode") if isinstance(last.get("render_mode"), str) else None
        self.single_observation_space = schema_to_space(obs_schema)
        self.single_action_space = schema_to_space(act_schema)
        size = self.batch_size if self.batched else self.num_envs  # async batches: spaces of one batch
        self.observation_space = batch_space(self.single_observation_space, size)
        self.action_space = batch_space(self.single_action_space, size)
        self._arrays = arrays = HostArrays(obs_schema, act_schema, self.single_action_space, self.copy)
        if self.batched and not arrays.obs_fixed:
            raise PortalError("async batches over hosts need an observation space with a fixed layout")
        self._recovery = recovery = failure_policy(
            options.on_env_failure,
            hosts,
            arrays.checked_obs,
            obs_schema,
            self.autoreset_mode,
            options.max_restarts,
            float(options.startup_timeout),
            self.backend.heartbeat_timeout,
        )
        self._exchange = Exchange(hosts, recovery, arrays, options.ring_depth, self.step_timeout, self.batched)
        self._lockstep = RemoteLockstep(hosts, self._exchange, arrays, recovery, self.num_envs)
        self._batches = RemoteBatches(hosts, self._exchange, arrays, recovery, self._lockstep) if self.batched else None
        self._calls = HostCalls(hosts, self._exchange)

    # -- status and shutdown ------------------------------------------------------------------------
    def stats(self, window: float = WINDOW_S) -> dict[str, Any]:
        """``VectorPortal.stats`` over every host (each host's report of its local portal, merged in
        env order), with the agent's shares measured here and each host's wire bytes (``hosts``)."""
        self._check_usable()
        self._pending.check_idle("stats")
        window = check_window(window)
        replies = self._exchange.ask([{"cmd": STATS, "window": window} for _ in self._hosts], "stats")
        parts, first = [], 0
        for host, header, _ in replies:
            parts.append(host_part(header.get("stats"), host, first))
            first += len(host.servers)
        agent, since_start = self._clock_history.shares(window)
        return merge(parts, agent, since_start, self.wire_stats())

    def wire_stats(self) -> list[dict[str, Any]]:
        """Per host, in order: its address, the codec, and the bytes of observations before and after
        compression (``ratio``), as received so far."""
        return self._hosts.wire_stats()

    @property
    def servers(self) -> list[dict[str, Any]]:
        """Where each env lives: the env servers of every host in env order (``envs`` are this portal's
        env indices; ``pid`` is None: it is the host's to know), with the ``host`` that runs them."""
        return list(self._closed_servers) if self.closed else self._hosts.server_list()

    @property
    def hosts(self) -> list[dict[str, Any]]:
        """Each host: its ``address``, ``envs``, env ``servers`` and the ``codec`` it compresses with."""
        return self._hosts.describe()

    def close_extras(self, **kwargs: Any) -> None:
        if not self._pending.idle:
            logger.warn(
                f"Calling `close` while waiting for a pending call to `{self._pending.state.value}` to complete."
            )
            self._pending.end()
        self._closed_servers = self._hosts.server_list()
        self._hosts.close()

    def close(self, **kwargs: Any) -> None:
        if self.closed:
            return
        self.closed = True
        self.close_extras(**kwargs)

    def __del__(self) -> None:
        if not getattr(self, "closed", True):
            try:
                self.close()
            except Exception:
                pass
