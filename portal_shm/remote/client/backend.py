"""``backend="remote"``: envs on env hosts (``portal-shm host``) on other machines.

Not a local runtime: the agent starts nothing, it asks each host to run its share of the envs with
a runtime of the host's (``runtime="process"`` by default, ``"docker"`` with an ``image``, ...).
The options are fields of ``RemoteBackend``; ``make_vec`` hands keyword arguments named like them
to it, and those named like an option of the host's runtime (``image=``) to that runtime.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import os
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence, Union

from ...errors import PortalError
from .. import codecs

HOSTS_ENV_VAR = "PORTAL_SHM_HOSTS"


@dataclass
class LinkOptions:
    """How the agent talks to env hosts, whoever placed them (``RemoteBackend``, ``RayBackend``).

    Args:
        runtime: the host-side runtime of the envs (``"process"``, ``"docker"``, ``"venv"``), as
            the host allows; ``runtime_options`` are its options (``{"image": ...}``).
        compression: ``"auto"`` (image observations, off loopback), ``"none"``, ``"lz4"``, ``"zstd"``.
        heartbeat_timeout: seconds without a word from a host before ``HostLostError`` (and the
            seconds its host waits before freeing this agent's envs); heartbeats every
            ``heartbeat_interval``.
        connect_timeout: seconds to wait for a host to answer a hello, beside ``startup_timeout``.
    """

    runtime: str = "process"
    runtime_options: dict[str, Any] = field(default_factory=dict)
    compression: str = "auto"
    heartbeat_interval: float = 1.0
    heartbeat_timeout: float = 10.0
    connect_timeout: float = 15.0

    def check_link(self) -> None:
        codecs.check_wish(self.compression)
        if self.heartbeat_interval <= 0 or self.heartbeat_timeout < 2 * self.heartbeat_interval:
            raise ValueError("heartbeat_timeout must be at least twice heartbeat_interval (both in seconds, > 0)")


@dataclass
class RemoteBackend(LinkOptions):
    """Where the env hosts are and how to reach them (``LinkOptions``: how the agent talks to them).

    Args:
        hosts: ``"tcp://HOST:PORT"`` of each host (default: ``$PORTAL_SHM_HOSTS``, space separated).
        counts: envs per host, in order (default: spread evenly, the first hosts get the remainder).
        insecure: plain text and no authentication; only against a host started ``--insecure``.
        client_key: this agent's ``.key_secret`` file (default ``~/.config/portal-shm/keys/USER@HOSTNAME.key_secret``,
            what ``portal-shm keys create`` makes; ``agent.key_secret`` there when only that exists).
        host_key: the hosts' public key (Z85 or a ``.key`` file), or one per host, pinned.
        runtime: where the host runs the envs (``LinkOptions``).
        runtime_options: options of that runtime (``LinkOptions``).
        compression: of observations on the wire (``LinkOptions``).
        heartbeat_interval: seconds between heartbeats (``LinkOptions``).
        heartbeat_timeout: seconds of silence that lose a host (``LinkOptions``).
        connect_timeout: seconds to reach a host (``LinkOptions``).
    """

    hosts: Optional[Sequence[str]] = None
    counts: Optional[Sequence[int]] = None
    insecure: bool = False
    client_key: Optional[str] = None
    host_key: Optional[Union[str, Sequence[str]]] = None

    name = "remote"

    def host_list(self) -> list[str]:
        hosts = list(self.hosts) if self.hosts else os.environ.get(HOSTS_ENV_VAR, "").split()
        if not hosts:
            raise PortalError(
                f"backend='remote' needs hosts: make_vec(..., hosts=['tcp://HOST:PORT']) or {HOSTS_ENV_VAR}="
                "'tcp://a:5555 tcp://b:5555'"
            )
        for address in hosts:
            if not isinstance(address, str) or not address.startswith("tcp://") or ":" not in address[6:]:
                raise PortalError(f"host address {address!r} is not tcp://HOST:PORT (the port `portal-shm host` binds)")
        return hosts

    def split(self, num_envs: int) -> list[int]:
        return split_envs(num_envs, len(self.host_list()), self.counts)

    def check(self) -> None:
        self.check_link()


def split_envs(num_envs: int, hosts: int, counts: Optional[Sequence[int]]) -> list[int]:
    """Envs per host: ``counts`` checked, or ``num_envs`` spread evenly (the first hosts get the rest)."""
    if counts is not None:
        counts = [int(c) for c in counts]
        if len(counts) != hosts or sum(counts) != num_envs or min(counts) < 1:
            raise PortalError(
                f"counts {counts} must give each of the {hosts} hosts at least one env and add up to num_envs={num_envs}"
            )
        return counts
    if num_envs < hosts:
        raise PortalError(f"{num_envs} envs cannot be spread over {hosts} hosts: give each at least one")
    base, extra = divmod(num_envs, hosts)
    return [base + (1 if i < extra else 0) for i in range(hosts)]


def is_loopback(address: str) -> bool:
    host = address[len("tcp://") :].rsplit(":", 1)[0].strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def option_names() -> set[str]:
    return {f.name for f in dataclasses.fields(RemoteBackend)}
