"""A due server's envs handed over to its spare: their states taken from the old server, the spare
swapped into its place, the states restored in it.

Which servers are swapped, and when, is the recycler's; this is the exchange with the two servers
(``GET_STATE`` with ``then_close``, ``SET_STATE`` into the step's slot) and what happens when the
fresh server fails once the old one closed: it is started cold in place and given the states
again, so the envs' episodes go on (a restart in place, not counted nor shown: ``recovery.py``).
"""

from __future__ import annotations

from typing import Optional

from ...errors import PortalError, ServerProtocolError
from ...wire import protocol
from ..local.recovery import Recovery
from ..local.session import ServerLink
from .spares import Spares


class Handover:
    """Swaps servers for their spares, carrying their envs' states (the recycler decides which)."""

    def __init__(
        self, spares: Spares, recovery: Recovery, step_timeout: Optional[float], startup_timeout: float
    ) -> None:
        self._spares = spares
        self._recovery = recovery
        self._step_timeout = step_timeout
        self._startup_timeout = startup_timeout

    def take_states(self, server: ServerLink) -> tuple[list[bytes], bool]:
        """The states of the old server's envs, and whether it closed after sending them (its
        answer says so; a server that does not know ``then_close`` is closed by the swap)."""
        message = {"cmd": protocol.GET_STATE, "envs": server.env_indices, "allow_pickle": False, "then_close": True}
        server.channel.send(message, server.check_alive)
        server.post_control()
        message = server.recv(self._step_timeout, "get_state for recycling")
        if message["cmd"] == protocol.ERROR:
            raise server.error(message)
        results = message.get("results")
        if (
            message["cmd"] != protocol.REPLY
            or not isinstance(results, list)
            or len(results) != len(server.env_indices)
            or not all(isinstance(state, bytes) for state in results)
        ):
            raise ServerProtocolError(f"{server.describe()} answered get_state with something that is not states")
        return results, message.get("closed") is True

    def swap(
        self, server: ServerLink, k: int, prev: int, states: Optional[list[bytes]], closed: bool, in_ring: bool
    ) -> None:
        """The spare in ``server``'s place, given ``states`` (None: the envs have none) for step ``k``
        (``in_ring``: the old server retired in step ``k`` and slot ``k`` already shows them)."""
        try:
            self._spares.swap(server, self._startup_timeout, closed=closed, held=in_ring)
            if states is not None and in_ring:
                # Its answer is taken before it is posted its first step (the others are posted
                # theirs first): its restore runs while the agent goes on, no step waits for it.
                self._send_states(server, k, prev, states, True)
                server.owed = lambda: self._states_restored(server, k, prev, states)
            elif states is not None:
                self._set_states(server, k, prev, states)
        except PortalError as exc:
            # The fresh server failed once the old one had closed: a cold start in place, then the
            # states (or the reseeded reset the recycler asks for): nothing of the envs is lost but
            # time, and their episodes go on: a restart in place, not counted nor shown (``recovery.py``).
            self._recovery.restart(server, exc, "recycle", counted=False)
            if states is not None:
                self._set_states(server, k, prev, states, in_ring)

    def _set_states(self, server: ServerLink, k: int, prev: int, states: list[bytes], in_ring: bool = False) -> None:
        """Restore the envs' states in the fresh server (into slot ``k``, which its step then writes;
        ``in_ring``: slot ``k`` already shows them, as its predecessor's last step wrote it)."""
        self._send_states(server, k, prev, states, in_ring)
        self._check_restored(server)

    def _send_states(self, server: ServerLink, k: int, prev: int, states: list[bytes], in_ring: bool) -> None:
        message = {
            "cmd": protocol.SET_STATE,
            "slot": k,
            "prev_slot": prev,
            "envs": server.env_indices,
            "states": states,
            "allow_pickle": False,
            "in_ring": in_ring,
        }
        server.channel.send(message, server.check_alive)
        server.post_control()

    def _check_restored(self, server: ServerLink) -> None:
        reply = server.recv(self._step_timeout, "set_state of a recycled server")
        if reply["cmd"] == protocol.ERROR:
            raise server.error(reply)
        if reply["cmd"] != protocol.REPLY:
            raise ServerProtocolError(f"{server.describe()} answered set_state with {reply['cmd']!r:.40}")

    def _states_restored(self, server: ServerLink, k: int, prev: int, states: list[bytes]) -> None:
        """The answer a fresh server owes for the states sent at its swap (``ServerLink.settle``);
        one that failed is started cold in place and given them again, as in ``swap``."""
        try:
            self._check_restored(server)
        except PortalError as exc:
            self._recovery.restart(server, exc, "recycle", counted=False)
            self._set_states(server, k, prev, states, True)
