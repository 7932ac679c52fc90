"""The env hosts of one remote portal: ``RemoteHost`` (what the agent knows of one) and ``Hosts`` (the part
that opens their sessions, replaces a lost one, waits on them and closes them).

A ``RemoteHost`` holds its share of the envs, what its welcome said (its env servers) and the step state
the drivers keep for it (its last observations, a restart's stand-in, envs in flight); under it a
``HostLink`` only carries messages, and is replaced by a fresh one when the host was lost. Where the
hosts are and which keys reach them is the ``Placement``'s to say.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Iterator, Optional

import numpy as np
import zmq

from ... import errors
from ...agent.contract.start_progress import StartProgress
from ...agent.contract.validate import check_schema, is_hosting
from ...wire.protocol import packb
from .. import codecs
from ..error_data import from_data
from ..messages import CLOSE, WELCOME
from . import reach
from .backend import LinkOptions, is_loopback
from .link import HostLink, poller_of, wait
from .placement import Placement

MAX_MESSAGE = 1 << 31  # what one reply may hold: a batch of large frames


def host_error(host: Any, header: dict[str, Any]) -> Exception:
    """A host's error as the agent's own exception, with this portal's env indices."""
    return from_data(header, host.address, host.offset, host.num_envs)


class RemoteHost:
    """One env host of a portal: envs ``offset .. offset + num_envs - 1``, and the link to it."""

    def __init__(self, index: int, offset: int, num_envs: int, link: HostLink) -> None:
        self.index = index
        self.offset = offset
        self.num_envs = num_envs
        self.link = link
        self.servers: list[str] = []  # the host's env servers (runtime descriptions), from its welcome
        self.server_envs: list[list[int]] = []  # and the envs of each, as indices among this host's
        self.server_hosting: list[Optional[str]] = []  # and what steps them (``EnvServer`` ``hosting``)
        self.last_obs: list[np.ndarray] = []  # observation leaves as the last lockstep call left them
        self.last_obs_value: Any = None  # the same for spaces without a fixed layout
        self.in_flight = 0  # async batches: envs sent to this host and not yet back
        # (what a restart owes the host's envs is the failure policy's: ``recovery.py``)

    @property
    def address(self) -> str:
        return self.link.address

    @property
    def env_indices(self) -> list[int]:
        return list(range(self.offset, self.offset + self.num_envs))

    def holds(self, ids: np.ndarray) -> bool:
        return bool(self.offset <= ids.min() and ids.max() < self.offset + self.num_envs)

    def welcomed(self, header: dict[str, Any]) -> None:
        """What a welcome says of the host's env servers, each checked."""
        self.servers = [str(s) for s in header.get("servers") or []]
        envs = header.get("server_envs")
        valid = (
            isinstance(envs, list)
            and len(envs) == len(self.servers)
            and all(isinstance(e, list) and all(isinstance(i, int) and 0 <= i < self.num_envs for i in e) for e in envs)
        )
        self.server_envs = envs if valid and isinstance(envs, list) else [[] for _ in self.servers]
        hosting = header.get("server_hosting")  # (an older host sends none)
        valid = isinstance(hosting, list) and len(hosting) == len(self.servers) and all(map(is_hosting, hosting))
        self.server_hosting = list(hosting) if valid and isinstance(hosting, list) else [None] * len(self.servers)


class Hosts:
    """The hosts of one portal, in env order, and the sessions the agent holds with them."""

    def __init__(self, placement: Placement, link: LinkOptions, hello: dict[str, Any]) -> None:
        self.placement = placement
        self.link_options = link
        self.hello = hello
        self.context = zmq.Context()
        self.hosts: list[RemoteHost] = []
        self.broken: Optional[BaseException] = None  # a failure after which only close() is left
        self._poller_key: list[int] = []
        self._poller: Optional[zmq.Poller] = None

    def __iter__(self) -> Iterator[RemoteHost]:
        return iter(self.hosts)

    def __len__(self) -> int:
        return len(self.hosts)

    def __getitem__(self, index: int) -> RemoteHost:
        return self.hosts[index]

    @property
    def links(self) -> list[HostLink]:
        return [host.link for host in self.hosts]

    # -- sessions --------------------------------------------------------------------------------
    def connect(self, num_envs: int, deadline_s: float) -> list[dict[str, Any]]:
        """A session on every host, its envs started: the welcomes, in host order (a refusal raised)."""
        addresses, counts = self.placement.addresses(), self.placement.env_counts(num_envs)
        for address, problem in zip(addresses, reach.unreachable_all(addresses)):
            if problem:  # refused or unresolvable: say so now, not after heartbeat_timeout of silence
                fix = (
                    "check the name in hosts= (or $PORTAL_SHM_HOSTS), or give the host's IP address"
                    if problem.unresolved
                    else "is `portal-shm host --bind tcp://0.0.0.0:PORT` running there, and that port open to "
                    "this machine?"
                )
                raise errors.PortalError(f"cannot reach env host {address}: {problem}; {fix}")
        offset, deadline = 0, time.monotonic() + deadline_s + self.link_options.connect_timeout
        for index, (address, count) in enumerate(zip(addresses, counts)):
            self.hosts.append(RemoteHost(index, offset, count, self._open(index, address, offset, count)))
            offset += count
        progress = StartProgress(f"{num_envs} envs on {len(self.hosts)} env host(s)", len(self.hosts), "hosts")

        def waiting() -> list[HostLink]:
            left = [host.link for host in self.hosts if 1 not in _results(host.link)]
            progress.update(len(self.hosts) - len(left))
            return left

        try:
            wait(self.links, waiting, deadline, "starting the envs")
        finally:
            progress.close()
        return [self._welcome(host) for host in self.hosts]

    def _open(self, index: int, address: str, offset: int, count: int, proven: bool = False) -> HostLink:
        """A connection to host ``index`` that has sent its hello (a fresh session each time), or a
        handshake the host refused raised, naming the fix (within one ``heartbeat_interval``: no
        send waits longer). ``proven``: this address took these keys before (``keys_proven``)."""
        options = self.link_options
        link = HostLink(
            self.context,
            address,
            offset,
            count,
            self.placement.curve(index),
            options.heartbeat_interval,
            options.heartbeat_timeout,
            max_message=MAX_MESSAGE,
        )
        link.keys_proven = proven
        offer = codecs.agent_offer(options.compression, is_loopback(address))
        hello = {**self.hello, "num_envs": count, "codecs": offer, "compression": options.compression}
        try:
            link.send(hello)
        except BaseException:
            link.close()
            raise
        return link

    def reopen(self, index: int, cause: BaseException, deadline: float) -> RemoteHost:
        """A fresh session with host ``index`` in place of the lost one (its hello answered), once
        the host is back; ``HostLostError`` when it is not back by ``deadline``."""
        host, start = self.hosts[index], time.monotonic()
        address = self.placement.address_after_loss(index, host.address, deadline)
        host.link.close()
        while True:
            host.link = link = self._open(index, address, host.offset, host.num_envs, proven=True)
            try:
                wait([link], lambda: [] if 1 in _results(link) else [link], deadline, "reconnecting")
                self._welcome(host)
                return host
            except (
                errors.HostLostError,
                errors.PortalTimeoutError,
            ):  # a timeout: the deadline passed, the host is not back
                link.close()
                if time.monotonic() > deadline:
                    raise errors.HostLostError(
                        address,
                        host.env_indices,
                        f"not back within startup_timeout={deadline - start:.3g} s after: {cause}",
                    ) from cause

    def _welcome(self, host: RemoteHost) -> dict[str, Any]:
        """The host's welcome of its session (its spaces), or the host's refusal raised."""
        link = host.link
        header: dict[str, Any]
        header, _ = link.results.pop(1, None) or link.results.pop(("router",))
        if header["cmd"] != WELCOME:
            raise host_error(host, header)
        link.established = True
        codec = header.get("codec")
        link.codec = codec if isinstance(codec, str) and codec in codecs.PREFERENCE else codecs.NONE
        host.welcomed(header)
        return header

    @staticmethod
    def spaces(welcomes: list[dict[str, Any]], hosts: list[RemoteHost]) -> tuple[Any, Any]:
        """The observation and action schemas every host announced (the same, or the error says so)."""
        schemas = None
        for host, header in zip(hosts, welcomes):
            obs, act = header.get("obs_schema"), header.get("act_schema")
            check_schema(obs, f"host {host.address}'s observation space")
            check_schema(act, f"host {host.address}'s action space")
            if schemas is None:
                schemas = (obs, act)
            elif packb([obs, act]) != packb(list(schemas)):
                raise errors.PortalError(
                    f"host {host.address} has other spaces than host {hosts[0].address}: is "
                    "the env of another version there?"
                )
        assert schemas is not None
        return schemas

    # -- waiting -----------------------------------------------------------------------------------
    def wait(self, ready: Callable[[], list[HostLink]], deadline: Optional[float], what: str) -> None:
        """``wait`` on the links; a timeout leaves the hosts mid-request, so the portal cannot go on
        (as a local portal cannot): only ``close()`` is left, which frees the hosts' envs."""
        key = [id(link) for link in self.links]
        if self._poller is None or key != self._poller_key:  # made again when a link was replaced
            self._poller_key, self._poller = key, poller_of(self.links)
        try:
            wait(self.links, ready, deadline, what, self._poller)
        except errors.PortalTimeoutError as exc:
            self.broken = exc
            raise

    def index_of(self, lost: errors.HostLostError) -> int:
        """The host a ``HostLostError`` is about."""
        return next(host.index for host in self.hosts if host.offset == lost.env_indices[0])

    # -- what the portal shows -----------------------------------------------------------------
    def server_list(self) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for host in self.hosts:
            for runtime, envs, hosting in zip(host.servers, host.server_envs, host.server_hosting):
                out.append(
                    {
                        "server": len(out),
                        "envs": [host.offset + i for i in envs],
                        "runtime": f"{runtime} on host {host.address}",
                        "pid": None,
                        "host": host.address,
                        "hosting": hosting,
                    }
                )
        return out

    def describe(self) -> list[dict[str, Any]]:
        return [
            {"address": h.address, "envs": h.env_indices, "servers": h.servers, "codec": h.link.codec}
            for h in self.hosts
        ]

    def wire_stats(self) -> list[dict[str, Any]]:
        """Per host, in order: its address, the codec, and the bytes of observations before and after
        compression (``ratio``), as received so far."""
        return [{"address": h.address, **h.link.stats.as_dict(h.link.codec)} for h in self.hosts]

    # -- the end -------------------------------------------------------------------------------
    def close(self) -> None:
        """End every session (the hosts free its envs), close the links, stop what the placement started."""
        live = [link for link in self.links if link.established]  # (a refused hello has no session to close)
        try:
            seqs = {id(link): link.send({"cmd": CLOSE}) for link in live}
            wait(live, lambda: [lk for lk in live if seqs[id(lk)] not in lk.results], time.monotonic() + 5.0, "close")
        except Exception:
            pass  # the hosts free the envs of a vanished agent on their own
        try:
            for link in self.links:
                link.close()
            self.context.term()
        finally:
            self.placement.close()  # (hosts a placement started: stopped)


def _results(link: HostLink) -> dict[Any, Any]:
    """A link's replies, the router's answer to a hello counted as the hello's (number 1)."""
    if ("router",) in link.results:
        link.results[1] = link.results[("router",)]
    return link.results
