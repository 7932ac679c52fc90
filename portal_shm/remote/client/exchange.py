"""One request to each of some hosts, and their replies: what every lockstep call and every per-env
call of a remote portal is made of.

``post`` sends each host asked its header (and arrays) and returns at once; ``collect`` waits for
the replies. A host that was not asked answers with what it left: its stand-in (a restarted host's
reset in NextStep mode) in a step, its last observations in a masked reset. With the restart
policy a host lost meanwhile is reconnected (``recovery.py``) while the others' replies are kept:
a step ends its envs' episodes, any other request is asked again.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Optional

from ...errors import HostLostError
from ..messages import ERROR
from .host_arrays import HostArrays, Reply
from .hosts import Hosts, host_error
from .link import wait
from .recovery import HostRecovery


@dataclass
class Posted:
    """A request in flight: each host's header (None: not asked), its arrays, the numbers of the
    requests sent (host index -> number) and what it is for (``step``, ``reset``, a call's name)."""

    headers: list[Optional[dict[str, Any]]]
    arrays: list[Any]
    pending: dict[int, int]
    what: str


class Exchange:
    """Requests to the hosts of one portal and their replies, with recovery of lost hosts."""

    def __init__(
        self,
        hosts: Hosts,
        recovery: HostRecovery,
        arrays: HostArrays,
        ring_depth: int,
        step_timeout: Optional[float],
        batched: bool,
    ) -> None:
        self.hosts = hosts
        self.recovery = recovery
        self.arrays = arrays
        self.ring_depth = ring_depth
        self.step_timeout = step_timeout
        self.batched = batched

    def post(
        self, headers: list[Optional[dict[str, Any]]], arrays: Optional[list[Any]] = None, what: str = ""
    ) -> Posted:
        """Send one request per host (a host whose header is None is not asked); returns at once."""
        arrays = arrays or [()] * len(self.hosts)
        if not self.batched and self.arrays.obs_fixed:
            for host in self.hosts:
                if not host.link.outputs:  # a new link (a reconnect, too): lockstep replies decode into these
                    host.link.use_outputs(self.arrays.obs_specs, self.ring_depth)
        pending = {
            i: host.link.send(header, arrays[i])
            for i, (host, header) in enumerate(zip(self.hosts, headers))
            if header is not None
        }
        return Posted(headers, arrays, pending, what)

    def collect(self, posted: Posted, timeout: Optional[float] = None, others: bool = True) -> list[Reply]:
        """The replies of ``posted``, in host order: [(host, header, arrays)]; ``others=False``: of
        the hosts asked only. ``timeout`` (seconds, or ``step_timeout`` and 5 s for the link)
        raises ``PortalTimeoutError``."""
        pending, what, lost = posted.pending, posted.what, {}
        hosts = self.hosts

        def waiting() -> list[Any]:
            return [hosts[i].link for i, seq in pending.items() if i not in lost and seq not in hosts[i].link.results]

        if timeout is None and self.step_timeout is not None:
            timeout = self.step_timeout + 5.0
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            try:
                hosts.wait(waiting, deadline, what)
                break
            except HostLostError as exc:
                if self.batched or not self.recovery.handles(exc):
                    raise
                lost[hosts.index_of(exc)] = exc
        out: list[Reply] = []
        for i, host in enumerate(hosts):
            if i in lost:
                out.append(self._recover(i, lost[i], posted.headers[i], posted.arrays[i], what))
            elif i not in pending and not others:
                continue
            elif i not in pending:
                owed = self.recovery.owed_reply(host, what)  # (a restart's: episodes end, or a stand-in)
                if owed is not None:
                    out.append(owed)
                else:
                    out.append((host, {"infos": [], "obs": host.last_obs_value}, list(host.last_obs)))
            else:
                header, data = host.link.results.pop(pending[i])
                if header["cmd"] == ERROR:
                    raise host_error(host, header)
                out.append((host, header, data))
        return out

    def ask(self, headers: list[Optional[dict[str, Any]]], what: str) -> list[Reply]:
        """``post`` and ``collect``: one request per host, waited for."""
        return self.collect(self.post(headers, what=what))

    def _recover(
        self, index: int, cause: HostLostError, header: Optional[dict[str, Any]], arrays: Any, what: str
    ) -> Reply:
        """Host ``index`` was lost during ``what``: a step ends its envs' episodes, anything else is
        asked again of a fresh session, whose envs' episodes end at the next step (after a call) or
        begin with the repeated reset or restore, which shows ``env_restarted`` (a reset)."""
        host = self.hosts[index]
        if what == "step":
            return self.recovery.end_step(index, cause, host.last_obs)
        if what in ("reset", "set_state"):
            self.recovery.reconnect(index, cause)  # (the request repeated below replaces the restart's reset)
        else:
            self.recovery.end_later(index, cause)
        link = host.link
        assert header is not None
        seq = link.send(header, arrays)
        deadline = None if self.step_timeout is None else time.monotonic() + self.step_timeout + 5.0  # (as collect)
        wait([link], lambda: [] if seq in link.results else [link], deadline, what)
        reply, data = link.results.pop(seq)
        if reply["cmd"] == ERROR:
            raise host_error(host, reply)
        if what == "reset" and isinstance(reply.get("infos"), list):
            reply = {**reply, "infos": reply["infos"] + self.recovery.restarted_infos(host, cause)}
        return host, reply, data
