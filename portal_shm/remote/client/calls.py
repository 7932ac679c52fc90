"""``HostCalls``: the contract's per-env requests (``agent/contract/drivers.py``) sent to env hosts.

Each host owns a contiguous range of the portal's envs; a request names its envs by the host's
own indices (``env_ids`` less the host's offset) and the host's reply carries one value per env
named, which is checked here before the contract orders them back.
"""

from __future__ import annotations

from typing import Any, Optional

from ...agent.contract.drivers import Request
from ...errors import ServerProtocolError
from ...wire.protocol import packb
from .. import messages
from .exchange import Exchange, Posted
from .hosts import Hosts

#: The contract's per-env requests as the host protocol names them.
COMMANDS = {
    "call": messages.CALL,
    "get_attr": messages.GET_ATTR,
    "set_attr": messages.SET_ATTR,
    "get_state": messages.GET_STATE,
    "record": messages.RECORD,
    "render": messages.RENDER,
}
#: Requests whose replies carry no values.
_SILENT = (messages.SET_ATTR, messages.RECORD)


class HostCalls:
    """Per-env requests to the hosts that own the envs, over the portal's ``Exchange``."""

    def __init__(self, hosts: Hosts, exchange: Exchange) -> None:
        self.hosts = hosts
        self.exchange = exchange
        self._posted: Optional[Posted] = None  # the per-env call in flight

    def owners(self) -> list[list[int]]:
        return [host.env_indices for host in self.hosts]

    def post(self, requests: dict[int, Request], what: str) -> None:
        headers: list[Optional[dict[str, Any]]] = [None] * len(self.hosts)
        for j, request in requests.items():
            header = {"cmd": COMMANDS[request.op], **request.fields}
            if request.envs is not None:
                header["env_ids"] = [i - self.hosts[j].offset for i in request.envs]
            packb(header)  # raises TypeError naming an unsendable value before any host is told
            headers[j] = header
        self._posted = self.exchange.post(headers, what=what)

    def collect(self, what: str, timeout: Optional[float]) -> list[Any]:
        posted, self._posted = self._posted, None
        assert posted is not None
        values: list[Any] = []
        asked = [header for header in posted.headers if header is not None]
        for (host, reply, _), header in zip(self.exchange.collect(posted, timeout, others=False), asked):
            if header["cmd"] in _SILENT:
                continue
            part = reply.get("values")
            expected = len(header["env_ids"]) if "env_ids" in header else host.num_envs
            if not isinstance(part, list) or len(part) != expected:
                raise ServerProtocolError(f"host {host.address} sent {what} values for another number of envs")
            values.extend(part)
        return values
