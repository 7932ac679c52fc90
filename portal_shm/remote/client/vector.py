"""``RemoteVectorPortal``: a gymnasium VectorEnv whose envs live on env hosts on other machines.

One message per host per step (lockstep) or per sub-batch (async batches, ``batch_size``): each
host steps its share of the envs in an ordinary local portal and answers with the batch's arrays
as frames. With async batches every host keeps ``n / batch_size`` sub-batches in flight, which
hides the round trip: N envs behind a round trip RTT step at most N / RTT times per second
(Little's law), and lockstep gets N / (RTT + N / X0) for a host that steps X0 envs/s locally.

Results are exactly a local portal's (and so SyncVectorEnv's): the hosts run the same local
portal, observations and flags cross as raw bytes, and infos are batched once, here, over all
envs in order (``infos.py``). Everything a host sends is checked against the spaces it announced.
"""

from __future__ import annotations

import time
from typing import Any, Optional

import numpy as np
import zmq
from gymnasium.vector.utils import batch_space

from ... import errors as E
from ...agent.contract.actions import ActionLeaves
from ...agent.contract.base import PortalVectorEnv, Request
from ...agent.contract.options import HOSTED, VectorOptions
from ...agent.contract.pending import PendingCall
from ...agent.contract.spaces import schema_to_space
from ...agent.contract.validate import check_schema
from ...agent.stats.clock import WINDOW_S, AgentClock, ClockHistory, check_window
from ...wire import protocol as P
from ...wire import trees
from ...wire.schema import is_fixed
from .. import codecs, frames
from .. import messages as M
from ..error_data import from_data
from ..infos import batch as batch_infos
from . import reach
from .backend import LinkOptions, RemoteBackend, is_loopback
from .link import HostLink, poller_of, wait
from .placement import FixedHosts, Placement
from .recovery import HostRecovery
from .stats import host_part, merge

#: The contract's per-env requests as the host protocol names them.
_COMMANDS = {
    "call": M.CALL,
    "get_attr": M.GET_ATTR,
    "set_attr": M.SET_ATTR,
    "get_state": M.GET_STATE,
    "record": M.RECORD,
    "render": M.RENDER,
}


def _error(link: HostLink, header: dict) -> Exception:
    """The host's error as the agent's own exception, with this portal's env indices."""
    return from_data(header, link.address, link.offset, link.num_envs)


class RemoteVectorPortal(PortalVectorEnv):
    """``num_envs`` copies of env ``env_id`` spread over the hosts of ``backend``.

    ``vector_kwargs`` are VectorPortal's (``autoreset_mode``, ``batch_size``, ``step_timeout``,
    ``on_env_failure``, ...); each host applies them to its local portal.
    """

    def __init__(
        self,
        env_id: str,
        num_envs: int,
        backend: LinkOptions,
        env_kwargs: Optional[dict] = None,
        copy: bool = False,
        placement: Optional[Placement] = None,
        **vector_kwargs: Any,
    ) -> None:
        backend.check()  # type: ignore[attr-defined]
        self.backend = backend
        if placement is None:
            if not isinstance(backend, RemoteBackend):
                raise TypeError(f"a {type(backend).__name__} needs its placement: pass placement=")
            placement = FixedHosts(backend)
        self.placement = placement
        self.num_envs = num_envs
        self.copy = copy
        self.closed = False
        self._pending = PendingCall()
        self._request: Optional[dict] = None  # the requests of the pending call
        self._broken: Optional[BaseException] = None  # a failure after which only close() is left
        self._closed_servers: list = []  # what ``servers`` says once closed
        self._links: list[HostLink] = []
        self.options = options = self._checked_options(num_envs, vector_kwargs)
        self.autoreset_mode = options.autoreset_mode
        self.batch_size = options.batch_size or num_envs
        self.step_timeout = options.step_timeout
        startup = float(options.startup_timeout)
        self._context = zmq.Context()
        try:
            vector = {k: v for k, v in vector_kwargs.items() if k != "batch_size" or v != num_envs}  # (lockstep)
            if "autoreset_mode" in vector:
                vector["autoreset_mode"] = self.autoreset_mode.value
            self._connect(env_id, env_kwargs or {}, vector, startup)
        except BaseException:
            self.close()
            raise
        self.metadata = {**self._host_metadata, "autoreset_mode": self.autoreset_mode}
        self._recovery = HostRecovery(
            self._links,
            self._reopen,
            self._checked_obs,
            self._obs_schema,
            self.autoreset_mode,
            options.on_env_failure,
            options.max_restarts,
            startup,
            backend.heartbeat_timeout,
        )
        self._last_ids = np.arange(0)
        self._clock = AgentClock()
        self._clock_history = ClockHistory(self._clock)

    # -- start-up --------------------------------------------------------------------------------
    def _checked_options(self, num_envs: int, vector_kwargs: dict) -> VectorOptions:
        """The options checked here, before any host is asked (each host checks them again, under
        its own bounds: an agent that skips this is refused there)."""
        return VectorOptions.of(num_envs, vector_kwargs, allowed=HOSTED)

    def _connect(self, env_id: str, env_kwargs: dict, vector_kwargs: dict, startup: float) -> None:
        b = self.backend
        hosts, counts = self.placement.addresses(), self.placement.env_counts(self.num_envs)
        self._hello = {
            "cmd": M.HELLO,
            "protocol": frames.PROTOCOL,
            "env_id": env_id,
            "env_kwargs": env_kwargs,
            "runtime": b.runtime,
            "runtime_options": dict(b.runtime_options),
            "vector": vector_kwargs,
        }
        for address, problem in zip(hosts, reach.unreachable_all(hosts)):
            if problem:  # refused or unresolvable: say so now, not after heartbeat_timeout of silence
                fix = (
                    "check the name in hosts= (or $PORTAL_SHM_HOSTS), or give the host's IP address"
                    if problem.unresolved
                    else "is `portal-shm host --bind tcp://0.0.0.0:PORT` running there, and that port open to "
                    "this machine?"
                )
                raise E.PortalError(f"cannot reach env host {address}: {problem}; {fix}")
        offset = 0
        for index, (address, count) in enumerate(zip(hosts, counts)):
            self._links.append(self._open_link(index, address, offset, count))
            offset += count
        wait(
            self._links,
            lambda: [link for link in self._links if 1 not in self.results_of(link)],
            time.monotonic() + startup + b.connect_timeout,
            "starting the envs",
        )
        schemas = None
        for link in self._links:
            header = self._welcome(link)
            obs, act = header.get("obs_schema"), header.get("act_schema")
            check_schema(obs, f"host {link.address}'s observation space")
            check_schema(act, f"host {link.address}'s action space")
            if schemas is None:
                schemas = (obs, act)
            elif P.packb([obs, act]) != P.packb(list(schemas)):
                raise E.PortalError(
                    f"host {link.address} has other spaces than host {self._links[0].address}: is "
                    "the env of another version there?"
                )
            metadata = header.get("metadata")
            self._host_metadata = metadata if isinstance(metadata, dict) else {}
            self.render_mode = header.get("render_mode") if isinstance(header.get("render_mode"), str) else None
        self._obs_schema, self._act_schema = schemas
        self.single_observation_space = schema_to_space(self._obs_schema)
        self.single_action_space = schema_to_space(self._act_schema)
        size = self.batch_size if self.batched else self.num_envs  # async batches: spaces of one batch
        self.observation_space = batch_space(self.single_observation_space, size)
        self.action_space = batch_space(self.single_action_space, size)
        self._obs_fixed, self._act_fixed = is_fixed(self._obs_schema), is_fixed(self._act_schema)
        self._obs_specs = trees.leaf_specs(self._obs_schema) if self._obs_fixed else []
        self._act_specs = trees.leaf_specs(self._act_schema) if self._act_fixed else []
        self._actions = ActionLeaves(self._act_schema, self.single_action_space) if self._act_fixed else None
        if self.batched and not self._obs_fixed:
            raise E.PortalError("async batches over hosts need an observation space with a fixed layout")

    def _poller(self) -> zmq.Poller:
        """One poller over every link, made again when a link was replaced (a reconnect)."""
        key = [id(link) for link in self._links]
        if getattr(self, "_poller_key", None) != key:
            self._poller_key, self._poller_cache = key, poller_of(self._links)
        return self._poller_cache

    def _open_link(self, index: int, address: str, offset: int, count: int) -> HostLink:
        """A connection to host ``index`` that has sent its hello (a fresh session each time)."""
        b = self.backend
        link = HostLink(
            self._context,
            address,
            offset,
            count,
            self.placement.curve(index),
            b.heartbeat_interval,
            b.heartbeat_timeout,
            max_message=1 << 31,
        )
        offer = codecs.agent_offer(b.compression, is_loopback(address))
        link.send({**self._hello, "num_envs": count, "codecs": offer, "compression": b.compression})
        return link

    def _reopen(self, index: int, cause: BaseException, deadline: float) -> HostLink:
        """A fresh session with host ``index`` in place of the lost one (its hello answered), once
        the host is back; ``HostLostError`` when it is not back by ``deadline``."""
        old, start = self._links[index], time.monotonic()
        address = self.placement.address_after_loss(index, old.address, deadline)
        old.close()
        while True:
            link = self._links[index] = self._open_link(index, address, old.offset, old.num_envs)
            link.keys_proven = True
            try:
                wait([link], lambda: [] if 1 in self.results_of(link) else [link], deadline, "reconnecting")
                self._welcome(link)
                return link
            except (E.HostLostError, E.PortalTimeoutError):  # a timeout: the deadline passed, the host is not back
                link.close()
                if time.monotonic() > deadline:
                    raise E.HostLostError(
                        address,
                        old.env_indices,
                        f"not back within startup_timeout={deadline - start:.3g} s after: {cause}",
                    ) from cause

    def _welcome(self, link: HostLink) -> dict:
        """The host's welcome of ``link``'s session (its spaces), or the host's refusal raised."""
        header, _ = link.results.pop(1, None) or link.results.pop(("router",))
        if header["cmd"] != M.WELCOME:
            raise _error(link, header)
        link.established = True
        link.codec = header.get("codec") if header.get("codec") in codecs.PREFERENCE else codecs.NONE
        link.servers = [str(s) for s in header.get("servers") or []]
        envs = header.get("server_envs")
        valid = (
            isinstance(envs, list)
            and len(envs) == len(link.servers)
            and all(isinstance(e, list) and all(isinstance(i, int) and 0 <= i < link.num_envs for i in e) for e in envs)
        )
        link.server_envs = envs if valid else [[] for _ in link.servers]
        return header

    @staticmethod
    def results_of(link: HostLink) -> dict:
        if ("router",) in link.results:
            link.results[1] = link.results[("router",)]
        return link.results

    # -- requests ----------------------------------------------------------------------------------
    def _check_usable(self) -> None:
        if self.closed:
            from gymnasium.error import ClosedEnvironmentError

            raise ClosedEnvironmentError("this RemoteVectorPortal is closed")
        if self._broken is not None:
            raise E.PortalError(f"this RemoteVectorPortal cannot continue after an earlier failure: {self._broken}")

    def _check_waitable(self) -> None:
        self._check_usable()

    def _wait(self, ready: Any, deadline: Optional[float], what: str) -> None:
        """``wait`` on the links; a timeout leaves the hosts mid-request, so the portal cannot go on
        (as a local portal cannot): only ``close()`` is left, which frees the hosts' envs."""
        try:
            wait(self._links, ready, deadline, what, self._poller())
        except E.PortalTimeoutError as exc:
            self._broken = exc
            raise

    def _request_all(self, headers: list, arrays: Optional[list] = None, what: str = "") -> list:
        """Send one request per host and wait for all replies: [(link, header, arrays)] in host order."""
        request = self._post_all(headers, arrays, what)
        return self._collect_all(request)

    def _post_all(self, headers: list, arrays: Optional[list] = None, what: str = "") -> dict:
        """Send one request per host (a host whose header is None is not asked); returns at once with
        what ``_collect_all`` needs to wait for the replies."""
        arrays = arrays or [()] * len(self._links)
        if not self.batched and self._obs_fixed:
            for link in self._links:
                if not link.outputs:  # a new link (a reconnect, too)
                    link.use_outputs(self._obs_specs, self.options.ring_depth)
        pending = {
            i: link.send(header, arrays[i])
            for i, (link, header) in enumerate(zip(self._links, headers))
            if header is not None
        }
        return {"pending": pending, "headers": headers, "arrays": arrays, "what": what}

    def _collect_all(self, request: dict, timeout: Optional[float] = None, others: bool = True) -> list:
        """The replies of ``_post_all``'s requests, in host order: [(link, header, arrays)].

        A host that was not asked answers with its stand-in (a restarted host's reset in NextStep
        mode), or for a masked reset its last observation. With the restart policy a lost host is
        reconnected (``recovery.py``) while the others' replies are kept. ``timeout`` (seconds, or
        ``step_timeout`` and 5 s for the link) raises ``PortalTimeoutError``. ``others=False``: the
        replies of the hosts asked only (a per-env call).
        """
        pending, headers, arrays, what = request["pending"], request["headers"], request["arrays"], request["what"]
        lost: dict = {}

        def waiting() -> list:
            return [self._links[i] for i, seq in pending.items() if i not in lost and seq not in self._links[i].results]

        if timeout is None and self.step_timeout is not None:
            timeout = self.step_timeout + 5.0
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            try:
                self._wait(waiting, deadline, what)
                break
            except E.HostLostError as exc:
                if not self._recovery.enabled or self.batched:
                    raise
                lost[next(i for i, link in enumerate(self._links) if link.offset == exc.env_indices[0])] = exc
        out = []
        for i, link in enumerate(self._links):
            if i in lost:
                out.append(self._recover(i, lost[i], headers[i], arrays[i], what))
            elif i not in pending and not others:
                continue
            elif i not in pending:
                stand_in, link.stand_in = link.stand_in, None
                if stand_in is not None and what == "step":
                    out.append((link, *stand_in))
                else:
                    out.append((link, {"infos": [], "obs": link.last_obs_value}, list(link.last_obs)))
            else:
                header, data = link.results.pop(pending[i])
                if header["cmd"] == M.ERROR:
                    raise _error(link, header)
                out.append((link, header, data))
        return out

    def _recover(self, index: int, cause: E.HostLostError, header: dict, arrays: Any, what: str) -> tuple:
        """Host ``index`` was lost during ``what``: a step ends its envs' episodes, anything else is asked again."""
        if what == "step":
            return self._recovery.end_step(index, cause, self._links[index].last_obs)
        self._recovery.reconnect(index, cause)
        link = self._links[index]
        seq = link.send(header, arrays)
        wait([link], lambda: [] if seq in link.results else [link], None, what)
        reply, data = link.results.pop(seq)
        if reply["cmd"] == M.ERROR:
            raise _error(link, reply)
        return link, reply, data

    def _split_actions(self, actions: Any, count: int, rows_of: Any) -> list:
        """Per host: (header fields, arrays) of its envs' actions; ``count`` actions in all."""
        if not self._act_fixed:
            values = list(actions)
            return [({"actions": values[rows_of(i)]}, []) for i in range(len(self._links))]
        arrays = [
            array.astype(dtype, copy=False)
            for array, (_, dtype) in zip(self._actions.arrays(actions, count), self._act_specs)
        ]
        return [({}, [a[rows_of(i)] for a in arrays]) for i in range(len(self._links))]

    def _observations(self, replies: list, counts: list) -> Any:
        if not self._obs_fixed:
            parts = [header.get("obs") for _, header, _ in replies]
            if len(parts) == 1:
                replies[0][0].last_obs_value = parts[0]
                return parts[0]
            raise E.PortalError("observation spaces without a fixed layout are served by one host at a time")
        per_host = []
        for (link, _, data), count in zip(replies, counts):
            per_host.append(self._checked_obs(link, data, count))
            if len(replies) == len(self._links):  # lockstep: what a masked reset of this host shows
                link.last_obs = per_host[-1]
        if len(per_host) == 1 and not self.copy:
            columns = per_host[0]
        else:
            columns = [np.concatenate(parts) for parts in zip(*per_host)]
        return trees.unflatten(columns, self._obs_schema)

    def _checked_obs(self, link: HostLink, data: list, count: int) -> list:
        """The observation leaves of a host's reply, each checked against the announced space."""
        if len(data) < len(self._obs_specs):
            raise E.ServerProtocolError(
                f"host {link.address} sent {len(data)} arrays for {len(self._obs_specs)} observation leaves"
            )
        return [
            frames.expect(a, dtype, (count,) + shape, f"host {link.address}'s observation")
            for a, (shape, dtype) in zip(data, self._obs_specs)
        ]

    def _flags(self, replies: list, counts: list) -> tuple:
        n = len(self._obs_specs) if self._obs_fixed else 0
        out = []
        for position, dtype in ((0, np.float64), (1, np.bool_), (2, np.bool_)):
            parts = []
            for (link, _, data), count in zip(replies, counts):
                if len(data) != n + 3:
                    raise E.ServerProtocolError(f"host {link.address} sent {len(data)} arrays, expected {n + 3}")
                parts.append(frames.expect(data[n + position], dtype, (count,), f"host {link.address}'s flags"))
            out.append(parts[0] if len(parts) == 1 and not self.copy else np.concatenate(parts))
        return tuple(out)

    def _infos(self, replies: list, offsets: list, total: int) -> dict:
        """All hosts' infos batched in env order, as one SyncVectorEnv would batch them."""
        infos: dict = {}
        for (link, header, _), offset in zip(replies, offsets):
            infos = batch_infos(
                header.get("infos", []), np.arange(offset, offset + link.num_envs), total, f"host {link.address}", infos
            )
        return infos

    # -- the contract's primitives (``agent/contract/base.py``) ------------------------------------
    def _owners(self) -> list[list[int]]:
        return [link.env_indices for link in self._links]

    def _post(self, requests: dict[int, Request], what: str) -> None:
        headers: list[Optional[dict]] = [None] * len(self._links)
        for j, request in requests.items():
            link = self._links[j]
            header = {"cmd": _COMMANDS[request.op], **request.fields}
            if request.envs is not None:
                header["env_ids"] = [i - link.offset for i in request.envs]
            headers[j] = header
        for header in headers:
            if header is not None:
                P.packb(header)  # raises TypeError naming an unsendable value before any host is told
        self._request = self._post_all(headers, what=what)

    def _collect(self, what: str, timeout: Optional[float]) -> list:
        request, self._request = self._request, None
        replies = self._collect_all(request, timeout, others=False)
        values: list = []
        asked = [header for header in request["headers"] if header is not None]
        for (link, reply, _), header in zip(replies, asked):
            if header["cmd"] in (M.SET_ATTR, M.RECORD):
                continue
            part = reply.get("values")
            expected = len(header["env_ids"]) if "env_ids" in header else link.num_envs
            if not isinstance(part, list) or len(part) != expected:
                raise E.ServerProtocolError(f"host {link.address} sent {what} values for another number of envs")
            values.extend(part)
        return values

    def _reset(self, seeds: list, options: Optional[dict], mask: Optional[np.ndarray]) -> None:
        self._request = self._reset_request(seeds, options, mask)

    def _reset_result(self, timeout: Optional[float]) -> tuple[Any, dict]:
        request, self._request = self._request, None
        replies = self._collect_all(request, timeout)
        counts = [link.num_envs for link in self._links]
        return self._observations(replies, counts), self._infos(
            replies, [lk.offset for lk in self._links], self.num_envs
        )

    def _async_reset(self, seeds: list, options: Optional[dict]) -> None:
        request = self._reset_request(seeds, options, None)
        self._collect_all(request)
        for link, header in zip(self._links, request["headers"]):
            if header is not None:  # the hosts that reset now step every env, in batches ``recv`` hands out
                link.in_flight = link.num_envs

    def _reset_request(self, seeds: list, options: Optional[dict], mask: Optional[np.ndarray]) -> dict:
        if mask is not None:
            options = {**(options or {}), "reset_mask": mask}
        self._recovery.note_reset(seeds, options)
        headers = []
        for link in self._links:
            part = dict(options) if options else None
            if mask is not None:
                part = {**(part or {}), "reset_mask": mask[link.offset : link.offset + link.num_envs]}
                if not part["reset_mask"].any():
                    headers.append(None)  # none of this host's envs: it keeps its observation, as gymnasium's do
                    continue
            link.stand_in = None
            headers.append({"cmd": M.RESET, "seed": seeds[link.offset : link.offset + link.num_envs], "options": part})
        return self._post_all(headers, what="reset")

    def _step(self, actions: Any) -> None:
        self._clock.enter()
        parts = self._split_actions(
            actions,
            self.num_envs,
            lambda i: slice(self._links[i].offset, self._links[i].offset + self._links[i].num_envs),
        )
        headers = [
            None if link.stand_in is not None else {"cmd": M.STEP, **fields}
            for link, (fields, _) in zip(self._links, parts)
        ]
        self._request = self._post_all(headers, [a for _, a in parts], "step")

    def _step_result(self, timeout: Optional[float]) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict]:
        request, self._request = self._request, None
        replies = self._collect_all(request, timeout)
        counts = [link.num_envs for link in self._links]
        obs = self._observations(replies, counts)
        reward, terminated, truncated = self._flags(replies, counts)
        infos = self._infos(replies, [lk.offset for lk in self._links], self.num_envs)
        self._clock.leave()
        return obs, reward, terminated, truncated, infos

    def _restore(self, states: dict[int, bytes], allow_pickle: bool) -> tuple[Any, dict]:
        """Each host that serves some of the envs restores its own; every env's observation comes
        back (the others' as they were)."""
        headers: list = []
        for link in self._links:
            local = [i for i in states if link.offset <= i < link.offset + link.num_envs]
            headers.append(
                None
                if not local
                else {
                    "cmd": M.SET_STATE,
                    "env_ids": [i - link.offset for i in local],
                    "states": [states[i] for i in local],
                    "allow_pickle": allow_pickle,
                }
            )
            if local:
                link.stand_in = None
        replies = self._collect_all(self._post_all(headers, what="set_state"))
        counts = [link.num_envs for link in self._links]
        return self._observations(replies, counts), self._infos(
            replies, [lk.offset for lk in self._links], self.num_envs
        )

    # -- async batches ------------------------------------------------------------------------------
    def _send(self, actions: Any, env_ids: Any) -> None:
        """Step ``env_ids`` (default: the last ``recv``'s) with ``actions``; they live on one host."""
        ids = self._last_ids if env_ids is None else np.asarray(env_ids, dtype=np.int64).reshape(-1)
        if ids.size == 0:
            raise ValueError("send() got no env_ids, and there is no batch from recv() to answer")
        link = self._link_of(ids)
        self._clock.enter()
        link.in_flight += ids.size
        local = ids - link.offset
        ((fields, arrays),) = self._split_actions(actions, ids.size, lambda i: slice(None))[:1]
        link.send({"cmd": M.SEND, "env_ids": local.tolist(), **fields}, arrays)

    def _link_of(self, ids: np.ndarray) -> HostLink:
        for link in self._links:
            if link.offset <= ids.min() and ids.max() < link.offset + link.num_envs:
                return link
        raise ValueError(f"env_ids {ids.tolist()} span several hosts; send each host's envs on their own")

    def _recv(self, timeout: Optional[float] = None) -> tuple:
        self._clock.enter()
        batch = self._next_batch(timeout)
        self._clock.leave()
        return batch

    def _next_batch(self, timeout: Optional[float]) -> tuple:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            try:
                self._wait(lambda: [] if any(lk.batches for lk in self._links) else self._links, deadline, "recv")
                now = time.monotonic()
                for link in self._links:  # a host with envs in flight is watched while others deliver
                    link.tick(now, link.in_flight > 0 and not link.batches)
                break
            except E.HostLostError as exc:
                if not self._recovery.enabled:
                    raise
                index = next(i for i, link in enumerate(self._links) if link.offset == exc.env_indices[0])
                self._recovery.restart_batched(index, exc)
        link = min((lk for lk in self._links if lk.batches), key=lambda lk: lk.batches[0][2])
        header, data, _ = link.batches.popleft()
        if header["cmd"] == M.ERROR:
            raise _error(link, header)
        ids = header.get("env_ids")
        if not (isinstance(ids, list) and ids and all(isinstance(i, int) and 0 <= i < link.num_envs for i in ids)):
            raise E.ServerProtocolError(f"host {link.address} sent a batch with invalid env_ids {ids!r:.80}")
        count = len(ids)
        replies = [(link, header, data)]
        obs = self._observations(replies, [count])
        reward, terminated, truncated = self._flags(replies, [count])
        global_ids = np.asarray(ids, dtype=np.int64) + link.offset
        infos = batch_infos(header.get("infos", []), np.arange(count), count, f"host {link.address}", envs=global_ids)
        link.in_flight = max(0, link.in_flight - count)
        if link.restarted:
            reward, truncated, infos = self._recovery.mark_restarted(link, ids, reward, truncated, infos)
        infos["env_id"] = global_ids.astype(np.int32)
        infos["_env_id"] = np.ones(count, dtype=np.bool_)
        self._last_ids = global_ids
        return obs, reward, terminated, truncated, infos

    # -- status and shutdown ------------------------------------------------------------------------
    def stats(self, window: float = WINDOW_S) -> dict:
        """``VectorPortal.stats`` over every host (each host's report of its local portal, merged in
        env order), with the agent's shares measured here and each host's wire bytes (``hosts``)."""
        self._check_usable()
        self._pending.check_idle("stats")
        window = check_window(window)
        replies = self._request_all([{"cmd": M.STATS, "window": window} for _ in self._links], what="stats")
        parts, first = [], 0
        for link, header, _ in replies:
            parts.append(host_part(header.get("stats"), link, first))
            first += len(link.servers)
        agent, since_start = self._clock_history.shares(window)
        return merge(parts, agent, since_start, self.wire_stats())

    def wire_stats(self) -> list[dict]:
        """Per host, in order: its address, the codec, and the bytes of observations before and after
        compression (``ratio``), as received so far."""
        return [{"address": link.address, **link.stats.as_dict(link.codec)} for link in self._links]

    @property
    def servers(self) -> list[dict]:
        """Where each env lives: the env servers of every host in env order (``envs`` are this portal's
        env indices; ``pid`` is None: it is the host's to know), with the ``host`` that runs them."""
        return list(self._closed_servers) if self.closed else self._server_list()

    def _server_list(self) -> list[dict]:
        out = []
        for link in self._links:
            for runtime, envs in zip(link.servers, link.server_envs):
                out.append(
                    {
                        "server": len(out),
                        "envs": [link.offset + i for i in envs],
                        "runtime": f"{runtime} on host {link.address}",
                        "pid": None,
                        "host": link.address,
                    }
                )
        return out

    @property
    def hosts(self) -> list[dict]:
        return [
            {"address": lk.address, "envs": lk.env_indices, "servers": lk.servers, "codec": lk.codec}
            for lk in self._links
        ]

    def close_extras(self, **kwargs: Any) -> None:
        if not self._pending.idle:
            from gymnasium import logger

            logger.warn(
                f"Calling `close` while waiting for a pending call to `{self._pending.state.value}` to complete."
            )
            self._pending.end()
        self._closed_servers = self._server_list()
        live = [link for link in self._links if link.established]  # (a refused hello has no session to close)
        try:
            seqs = {id(link): link.send({"cmd": M.CLOSE}) for link in live}
            wait(live, lambda: [lk for lk in live if seqs[id(lk)] not in lk.results], time.monotonic() + 5.0, "close")
        except Exception:
            pass  # the hosts free the envs of a vanished agent on their own
        try:
            for link in self._links:
                link.close()
            self._links = []
            self._context.term()
        finally:
            self.placement.close()  # (hosts a placement started: stopped)

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
