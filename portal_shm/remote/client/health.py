"""``HostsHealth``: whether a remote portal may go on (``agent/contract/drivers.py``'s ``PortalHealth``).

A remote portal breaks where its hosts say so: a wait that timed out leaves them mid-request
(``Hosts.broken``); every other failure reaches the caller and the portal goes on, a lost host
having been reconnected or reported by the drivers themselves.
"""

from __future__ import annotations

from typing import Any, Callable, TypeVar

from gymnasium.error import ClosedEnvironmentError

from ...errors import PortalError
from .hosts import Hosts

_T = TypeVar("_T")


class HostsHealth:
    def __init__(self, hosts: Hosts) -> None:
        self.hosts = hosts

    def check_usable(self, closed: bool) -> None:
        if closed:
            raise ClosedEnvironmentError("this RemoteVectorPortal is closed")
        if self.hosts.broken is not None:
            raise PortalError(f"this RemoteVectorPortal cannot continue after an earlier failure: {self.hosts.broken}")

    def check_waitable(self, closed: bool) -> None:
        """A wait after a failure is refused too: the hosts were left mid-request."""
        self.check_usable(closed)

    def run(self, work: Callable[..., _T], *args: Any) -> _T:
        return work(*args)
