"""Async batches over hosts (``batch_size``): each host keeps ``n / batch_size`` sub-batches in flight.

``send`` hands one host the actions of envs it holds and returns; ``recv`` takes the sub-batch that
arrived first from any host. Keeping every host busy hides the round trip: N envs behind a round
trip RTT step at most N / RTT times per second (Little's law). A host lost meanwhile is restarted
under the restart policy; its envs' fresh resets come in their next batch, marked truncated.
"""

from __future__ import annotations

import time
from typing import Any, Optional

import numpy as np

from ...errors import HostLostError, ServerProtocolError
from ..messages import ERROR, SEND
from .exchange import Exchange
from .host_arrays import HostArrays
from .hosts import Hosts, RemoteHost, host_error
from .lockstep import RemoteLockstep, Step
from .recovery import HostRecovery


class RemoteBatches:
    """``send``/``recv`` of a remote portal in async batches."""

    def __init__(
        self, hosts: Hosts, exchange: Exchange, arrays: HostArrays, recovery: HostRecovery, lockstep: RemoteLockstep
    ) -> None:
        self.hosts = hosts
        self.exchange = exchange
        self.arrays = arrays
        self.recovery = recovery
        self.lockstep = lockstep  # (whose reset every host runs before its batches)
        self.last_ids = np.arange(0)

    def reset(self, seeds: list[Any], options: Optional[dict[str, Any]]) -> None:
        """Reset every env; the hosts then step them all, in batches ``recv`` hands out."""
        posted = self.lockstep.post_reset(seeds, options, None)
        self.exchange.collect(posted)
        for host, header in zip(self.hosts, posted.headers):
            if header is not None:
                host.in_flight = host.num_envs

    def send(self, actions: Any, env_ids: Any) -> None:
        """Step ``env_ids`` (default: the last ``recv``'s) with ``actions``; they live on one host."""
        ids = self.last_ids if env_ids is None else np.asarray(env_ids, dtype=np.int64).reshape(-1)
        if ids.size == 0:
            raise ValueError("send() got no env_ids, and there is no batch from recv() to answer")
        host = self._host_of(ids)
        host.in_flight += ids.size
        local = ids - host.offset
        ((fields, arrays),) = self.arrays.split_actions(actions, ids.size, 1, lambda i: slice(None))
        host.link.send({"cmd": SEND, "env_ids": local.tolist(), **fields}, arrays)

    def _host_of(self, ids: np.ndarray) -> RemoteHost:
        for host in self.hosts:
            if host.holds(ids):
                return host
        raise ValueError(f"env_ids {ids.tolist()} span several hosts; send each host's envs on their own")

    def recv(self, timeout: Optional[float]) -> Step:
        """The next sub-batch any host finished: ``infos["env_id"]`` says which envs it holds."""
        hosts = self.hosts
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            try:
                hosts.wait(lambda: [] if any(h.link.batches for h in hosts) else hosts.links, deadline, "recv")
                now = time.monotonic()
                for host in hosts:  # a host with envs in flight is watched while others deliver
                    host.link.tick(now, host.in_flight > 0 and not host.link.batches)
                break
            except HostLostError as exc:
                if not self.recovery.handles(exc):
                    raise
                self.recovery.restart_batched(hosts.index_of(exc), exc)
        host = min((h for h in hosts if h.link.batches), key=lambda h: h.link.batches[0][2])
        header, data, _ = host.link.batches.popleft()
        if header["cmd"] == ERROR:
            raise host_error(host, header)
        ids = header.get("env_ids")
        if not (isinstance(ids, list) and ids and all(isinstance(i, int) and 0 <= i < host.num_envs for i in ids)):
            raise ServerProtocolError(f"host {host.address} sent a batch with invalid env_ids {ids!r:.80}")
        count = len(ids)
        replies = [(host, header, data)]
        obs = self.arrays.observations(replies, [count], every_host=False)
        reward, terminated, truncated = self.arrays.flags(replies, [count])
        global_ids = np.asarray(ids, dtype=np.int64) + host.offset
        infos = self.arrays.infos(replies, count, envs=global_ids)
        host.in_flight = max(0, host.in_flight - count)
        reward, truncated, infos = self.recovery.mark_restarted(host, ids, reward, truncated, infos)
        infos["env_id"] = global_ids.astype(np.int32)
        infos["_env_id"] = np.ones(count, dtype=np.bool_)
        self.last_ids = global_ids
        return obs, reward, terminated, truncated, infos
