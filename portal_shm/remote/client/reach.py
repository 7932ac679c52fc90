"""Is anything listening at an address? Asked once, before a ZeroMQ or Ray connection is made.

ZeroMQ connects in the background and retries forever in silence, so a host that refuses the
connection, or a name that does not resolve, would only surface as a heartbeat timeout with no
cause. The operating system knows better and at once: ``getaddrinfo`` fails for a name that does
not resolve, and a TCP connect to a port where nothing listens is refused within a round trip. Only
those definite answers fail here; a host that does not answer within ``timeout`` (a slow or lossy
network, a firewall that drops) is left to the caller's own, longer timeouts, as before.
"""

from __future__ import annotations

import errno
import socket
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, NamedTuple, Optional, Sequence

from ...errors import PortalError

PROBE_SECONDS = 2.0  # the most a probe waits before it leaves a silent host to the caller's timeouts

# Connect errors that mean "nothing will answer there now", as opposed to "no answer yet".
_DEFINITE = {
    errno.ECONNREFUSED: "connection refused",
    errno.EHOSTUNREACH: "no route to the host",
    errno.ENETUNREACH: "network unreachable",
}


class Unreachable(NamedTuple):
    """Why nothing answers at an address: ``cause`` for the message, ``unresolved`` when the name
    itself is unknown (the fix is the name, not the far side)."""

    cause: str
    unresolved: bool = False

    def __str__(self) -> str:
        return self.cause


def split_host_port(address: str) -> tuple[str, int]:
    """(host, port) of ``tcp://HOST:PORT``, ``ray://HOST:PORT`` or ``HOST:PORT`` (IPv6 in brackets)."""
    rest = address.split("://", 1)[-1]
    rest = rest.rsplit(";", 1)[-1]  # ZeroMQ's tcp://SOURCE;HOST:PORT names the peer last
    host, sep, port = rest.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise PortalError(f"{address!r} is not HOST:PORT")
    return host.strip("[]"), int(port)


def _resolve(host: str, port: int, timeout: float) -> Optional[list[Any]]:
    """``getaddrinfo``'s answers, raising what it raises; None when it takes longer than ``timeout``
    (a slow resolver is not a missing name)."""
    answer: dict[str, Any] = {}

    def ask() -> None:
        try:
            answer["infos"] = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except OSError as exc:
            answer["error"] = exc

    thread = threading.Thread(target=ask, name="portal-shm resolve", daemon=True)
    thread.start()
    thread.join(timeout)
    if "error" in answer:
        raise answer["error"]
    return answer.get("infos")


def unreachable(address: str, timeout: float = PROBE_SECONDS) -> Optional[Unreachable]:
    """Why nothing can be reached at ``address`` now ("cannot resolve box", "connection refused at
    box:5555"), or None when it answers, or may answer later (no reply within ``timeout``)."""
    host, port = split_host_port(address)
    try:
        infos = _resolve(host, port, timeout)
    except socket.gaierror as exc:
        return Unreachable(f"cannot resolve {host} ({exc.strerror or exc})", unresolved=True)
    except OSError as exc:
        return Unreachable(f"cannot resolve {host} ({exc})", unresolved=True)
    if infos is None:
        return None
    causes = []
    for family, kind, proto, _, sockaddr in infos:
        probe = socket.socket(family, kind, proto)
        probe.settimeout(timeout)
        try:
            probe.connect(sockaddr)
            return None  # something listens: the protocol on top says whether it is the right thing
        except socket.timeout:
            return None  # silent, not refused: the caller's timeouts decide
        except OSError as exc:
            if exc.errno not in _DEFINITE:
                return None
            causes.append(_DEFINITE[exc.errno])
        finally:
            probe.close()
    where = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    return Unreachable(f"{causes[0] if causes else 'no address'} at {where}")


def unreachable_all(addresses: Sequence[str], timeout: float = PROBE_SECONDS) -> list[Optional[Unreachable]]:
    """``unreachable`` of each address, probed side by side: silent hosts cost ``timeout`` once, not each."""
    if len(addresses) <= 1:
        return [unreachable(a, timeout) for a in addresses]
    with ThreadPoolExecutor(max_workers=min(32, len(addresses)), thread_name_prefix="portal-shm probe") as pool:
        return list(pool.map(lambda a: unreachable(a, timeout), addresses))
