"""Envpool-style async batches: hand the agent the first servers to finish, not all of them.

A server steps all its envs on one wake-up, so servers are the unit of asynchrony and a batch is a
set of whole servers (``batch_size`` is a multiple of the envs per server). In lockstep the agent
waits on each server's own ``done`` end in turn; here it polls all of them at once
(``doorbell.AnyDone``), and learns who finished from the servers' mailbox ``status`` words: it
marks a server PENDING before waking it, and the server overwrites that with OK or ERROR after
writing its results and before ringing.

The status words are the truth and a wake-up only says "look again" (rings do not queue up): after
every wake-up the agent scans the status words. Nothing waits on one server's ring, because a
failed server may never ring.
"""

from __future__ import annotations

import time
from collections import deque
from typing import Callable, Optional

import numpy as np

from ...wire.doorbell import AnyDone, spin_until
from ...wire.layout import STATUS, STATUS_PENDING
from ...wire.payoff import SpinPayoff

_WAIT_SLICE = 0.05


class ServerQueue:
    """Which servers are stepping, which have results waiting, and in what order they finished."""

    def __init__(self, num_servers: int, mailbox: np.ndarray, done: AnyDone, spin: float = 0.0) -> None:
        self.status = mailbox[:, STATUS]
        self.done = done
        self.spin = spin  # seconds to watch the status words (while a core is idle) before sleeping
        self.payoff = SpinPayoff(spin)  # while that pays (``spin.py``)
        self.pending: list[int] = []
        self.ready: deque[int] = deque()
        self.idle: set[int] = set(range(num_servers))
        self.sent_at = [0.0] * num_servers
        self._next_check = 0.0

    def started(self, server: int) -> None:
        """Call before waking ``server``: marks it PENDING so its OK/ERROR word can be seen."""
        self.status[server] = STATUS_PENDING
        self.idle.discard(server)
        self.pending.append(server)
        self.sent_at[server] = time.monotonic()

    def finished(self, server: int) -> None:
        """An idle server's result was made by the agent (it was not woken): ready at once."""
        self.idle.discard(server)
        self.ready.append(server)

    def stopped(self, server: int) -> None:
        """A stepping server failed and is replaced: ready now, with the result the agent makes.

        A ring it sent as it was stopped only wakes the agent for one more scan of the statuses.
        """
        self.pending.remove(server)
        self.ready.append(server)

    def reset_all_ready(self, order: list[int]) -> None:
        """After a reset every server holds fresh results, handed out in server order."""
        self.ready = deque(order)
        self.idle.clear()
        self.pending.clear()

    def collect(self) -> None:
        """Move servers whose status is no longer PENDING to ``ready``, in finishing order."""
        for server in list(self.pending):
            if self.status[server] != STATUS_PENDING:
                self.pending.remove(server)
                self.ready.append(server)

    def wait(
        self,
        servers_needed: int,
        deadline: Optional[float],
        check: Callable[[int], None],
        on_timeout: Callable[[list[int]], BaseException],
    ) -> None:
        """Block until ``servers_needed`` servers are ready (all pending ones when it is larger).

        Every ``_WAIT_SLICE`` seconds, even while other servers keep finishing, ``check(server)``
        looks at each server still stepping: it raises for a dead one, or replaces it and calls
        ``stopped``. Otherwise a dead server would go unnoticed as long as the others keep the
        batches coming.
        """
        servers_needed = min(servers_needed, len(self.ready) + len(self.pending))
        payoff, asleep_since = self.payoff, None
        while True:
            self.collect()
            if time.monotonic() >= self._next_check:
                self._check_pending(check)
            if len(self.ready) >= servers_needed:
                if asleep_since is not None:
                    payoff.slept(time.perf_counter() - asleep_since)
                return
            if payoff.worth_it():
                asleep_since = None
                hit = spin_until(self._any_finished, self.spin)
                payoff.spun(hit)
                if hit:
                    continue
            elif asleep_since is None:
                asleep_since = time.perf_counter()
            if not self.done.wait(_WAIT_SLICE) and deadline is not None and time.monotonic() > deadline:
                self._check_pending(check)
                if len(self.ready) < servers_needed:
                    raise on_timeout(list(self.pending))

    def _any_finished(self) -> bool:
        status = self.status
        return any(status[server] != STATUS_PENDING for server in self.pending)

    def _check_pending(self, check: Callable[[int], None]) -> None:
        for server in list(self.pending):
            self.collect()  # a server that finished meanwhile (say during a restart) is not checked
            if server in self.pending:
                check(server)
        self._next_check = time.monotonic() + _WAIT_SLICE

    def take(self, count: int) -> list[int]:
        """The first ``count`` ready servers (in finishing order), now waiting for actions."""
        taken = [self.ready.popleft() for _ in range(count)]
        self.idle.update(taken)
        return taken
