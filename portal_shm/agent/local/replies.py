"""Control messages to every server of a portal and their replies (reset, call, render, set_attr).

Control messages travel on each server's ZeroMQ channel, its doorbell says "look at the channel";
every server is sent its message before any reply is read, so they all work at once. Always all
replies are collected, even after an error, so that the servers stay in step with the agent.
``ControlCalls`` is also the local portal's call driver (``agent/contract/drivers.py``): the
contract's per-env requests become ring-protocol commands here.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Optional

from ...errors import EnvError, ServerProtocolError
from ...wire.protocol import CALL, ERROR, GET_STATE, RECORD, RENDER, REPLY, SET_ATTR, packb
from ..contract.drivers import Request
from ..contract.failure import FailurePolicy, repairing
from ..contract.validate import check_reply
from .health import Health
from .recovery import RESTARTABLE, Recovery
from .session import ServerLink

#: Servers that failed during a control exchange, with what they failed of.
Failed = dict[ServerLink, BaseException]

#: The contract's per-env requests as the ring protocol names them (a server's CALL reads what is not callable).
COMMANDS = {
    "call": CALL,
    "get_attr": CALL,
    "set_attr": SET_ATTR,
    "get_state": GET_STATE,
    "record": RECORD,
    "render": RENDER,
}


def send_all(
    servers: list[ServerLink], messages: list[dict[str, Any]], policy: FailurePolicy
) -> tuple[list[ServerLink], Failed]:
    """Send each server its control message; (servers reached, failed server -> exception).

    The first failure the ``policy`` does not handle raises.
    """
    sent: list[ServerLink] = []
    failed: Failed = {}
    for server, message in zip(servers, messages):
        try:
            server.settle()
            server.channel.send(message, server.check_alive)
            server.post_control()
            sent.append(server)
        except RESTARTABLE as exc:
            if not policy.handles(exc):
                raise
            failed[server] = repairing(exc)
    return sent, failed


def collect(
    servers: list[ServerLink],
    what: str,
    timeout: Optional[float],
    policy: FailurePolicy,
    chosen: Optional[dict[int, list[int]]] = None,
) -> tuple[dict[int, bytes], list[Any], list[EnvError], Failed]:
    """One reply per server: (infos blobs beside the ring, results, env errors, failed servers).

    A failed server the ``policy`` handles does not stop the collection: it is returned in the
    fourth item (server -> exception) for the caller to recover. A reset asks the policy about an
    env's exception (``step_errors``), other calls count only a broken server. ``chosen``: a call
    that names some envs only (server index -> its envs named), whose results are one per env named.
    """
    extras: dict[int, bytes] = {}
    results: list[Any] = []
    errors: list[EnvError] = []
    failed: Failed = {}
    deadline = None if timeout is None else time.monotonic() + timeout
    for server in servers:
        remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
        try:
            message = server.recv(remaining, what)
            if message["cmd"] == ERROR:
                server_errors = server.errors(message)
                errors.extend(policy.step_errors(server_errors) if what == "reset" else server_errors)
            elif message["cmd"] == REPLY:
                envs = server.env_indices if chosen is None else chosen[server.index]
                server_extras, server_results = check_reply(message, envs, server.describe())
                extras.update(server_extras)
                results.extend(server_results)
            else:
                raise ServerProtocolError(f"{server.describe()} answered {what} with {message['cmd']!r:.40}")
        except RESTARTABLE as exc:
            if not policy.handles(exc):
                raise
            failed[server] = repairing(exc)
    return extras, results, errors, failed


class ControlCalls:
    """The one control exchange in flight: sent by ``send`` (or ``post``), its replies taken by
    ``replies``/``collect``. ``settle``: what must finish before a control message goes out (the
    async batches still in flight)."""

    def __init__(
        self,
        servers: list[ServerLink],
        recovery: Recovery,
        health: Health,
        num_envs: int,
        settle: Optional[Callable[[], None]] = None,
    ) -> None:
        self.servers = servers
        self.settle = settle
        self.recovery = recovery
        self.health = health
        self.num_envs = num_envs
        self.step_timeout: Optional[float] = recovery.step_timeout
        self._sent: list[ServerLink] = []
        self._send_failed: Failed = {}
        self._chosen: Optional[dict[int, list[int]]] = None
        self.messages: dict[int, dict[str, Any]] = {}

    def send(self, messages: list[dict[str, Any]], chosen: Optional[dict[int, list[int]]] = None) -> None:
        """Send one message per server (with ``chosen``, only to the servers it names: server index ->
        the envs named there) and wake it; raises ``TypeError`` naming an unsendable value before any
        server is told."""
        for message in messages:
            packb(message)
        servers = self.servers if chosen is None else [self.servers[index] for index in chosen]
        self.messages = {server.index: message for server, message in zip(servers, messages)}
        self._chosen = chosen
        self._sent, self._send_failed = send_all(servers, messages, self.recovery)

    def replies(
        self, what: str, timeout: Optional[float]
    ) -> tuple[dict[int, bytes], list[Any], list[EnvError], Failed]:
        """``collect``'s four items for the servers reached, those not reached among the failed."""
        timeout = self.step_timeout if timeout is None else timeout
        extras, results, errors, failed = collect(self._sent, what, timeout, self.recovery, self._chosen)
        failed.update(self._send_failed)
        return extras, results, errors, failed

    # -- the call driver --------------------------------------------------------------------------
    def owners(self) -> list[list[int]]:
        return [server.env_indices for server in self.servers]

    def post(self, requests: dict[int, Request], what: str) -> None:
        messages = []
        for request in requests.values():
            message = {"cmd": COMMANDS[request.op], **request.fields}
            if request.op == "get_attr":  # a server's CALL reads what is not callable
                message.update(args=[], kwargs={})
            if request.op == "record" and "values" in message:
                message["frames"] = message.pop("values")
            if request.envs is not None:
                message["envs"] = request.envs
            messages.append(message)
        for message in messages:
            packb(message)  # raises TypeError naming an unsendable value before any server is told
        every = all(request.envs is None for request in requests.values())
        chosen = (
            None
            if every
            else {j: self.servers[j].env_indices if r.envs is None else r.envs for j, r in requests.items()}
        )
        if self.settle is not None:
            self.settle()
        self.send(messages, chosen)

    def collect(self, what: str, timeout: Optional[float]) -> list[Any]:
        """The results of a call, one per env (or none); a failed server is restarted and raises.

        An env's exception in a call naming some envs (``chosen``) leaves the portal usable."""
        _, results, errors, failed = self.replies(what, timeout)
        # -- recovery: restart broken servers; the call still raises, their envs end next step --
        for server, exc in failed.items():
            self.recovery.after_control_failure(server, exc)
        if failed:
            raise self.health.recovered(next(iter(failed.values())))
        if errors:
            self.health.raise_env_errors(errors, fatal=self._chosen is None)
        expected = self.num_envs if self._chosen is None else sum(len(envs) for envs in self._chosen.values())
        if len(results) not in (0, expected):
            raise ServerProtocolError(f"env servers returned {len(results)} results for {expected} envs")
        return results
