"""Envpool-style async batches: hand the agent the first servers to finish, not all of them.

A server steps all its envs on one wake-up, so servers are the unit of asynchrony and a batch is a
set of whole servers (``batch_size`` is a multiple of the envs per server). In lockstep the agent
waits on each server's own ``done`` bell in turn; here it must learn which of several servers
finished first, and one futex word cannot be waited on together with others. So every server
rings one shared ``done`` bell, and the agent finds out who rang by reading the servers' mailbox
``status`` words: it marks a server PENDING before waking it, and the server overwrites that with
OK or ERROR after writing its results and before ringing. A wake-up only says "look again":
rings do not queue up, so the status words alone say who is done.
"""

from __future__ import annotations

import time
from collections import deque
from typing import Callable, Optional

import numpy as np

from .layout import MAILBOX_FIELDS, STATUS_PENDING
from .doorbell import Doorbell

_STATUS = MAILBOX_FIELDS.index("status")
_WAIT_SLICE = 0.05


def server_sizes_error(sizes: list, batch_size: int, num_envs: int) -> Optional[str]:
    """Why these server sizes cannot serve batches of ``batch_size`` envs (None when they can)."""
    if len(set(sizes)) != 1 or batch_size % sizes[0]:
        return (
            f"batch_size={batch_size} must be a multiple of the envs per server, and all servers must host "
            f"the same number of envs; the envs were grouped into servers of {sorted(set(sizes))} envs. "
            f"Pass envs_per_server=D for a divisor D of both batch_size and num_envs={num_envs}"
        )
    return None


def default_envs_per_server(num_envs: int, batch_size: int, cores: int) -> int:
    """The largest divisor of both ``batch_size`` and ``num_envs`` that still spreads over the cores."""
    target = max(1, -(-num_envs // cores))
    return max(d for d in range(1, batch_size + 1)
               if batch_size % d == 0 and num_envs % d == 0 and d <= target)


class ServerQueue:
    """Which servers are stepping, which have results waiting, and in what order they finished."""

    def __init__(self, num_servers: int, mailbox: np.ndarray, done: Doorbell) -> None:
        self.status = mailbox[:, _STATUS]
        self.done = done
        self.pending: list[int] = []
        self.ready: deque[int] = deque()
        self.idle: set[int] = set(range(num_servers))

    def started(self, server: int) -> None:
        """Call before waking ``server``: marks it PENDING so its OK/ERROR word can be seen."""
        self.status[server] = STATUS_PENDING
        self.idle.discard(server)
        self.pending.append(server)

    def reset_all_ready(self, order: list) -> None:
        """After a reset every server holds fresh results, handed out in server order."""
        self.ready = deque(order)
        self.idle.clear()
        self.pending.clear()

    def _collect(self) -> None:
        """Move servers whose status is no longer PENDING to ``ready``, in finishing order."""
        for server in list(self.pending):
            if self.status[server] != STATUS_PENDING:
                self.pending.remove(server)
                self.ready.append(server)

    def wait(self, servers_needed: int, deadline: Optional[float], check_alive: Callable[[int], None],
             on_timeout: Callable[[list], BaseException]) -> None:
        """Block until ``servers_needed`` servers are ready (all pending ones when it is larger)."""
        servers_needed = min(servers_needed, len(self.ready) + len(self.pending))
        self._collect()
        while len(self.ready) < servers_needed:
            if self.done.wait(_WAIT_SLICE):
                self._collect()
                continue
            for server in self.pending:
                check_alive(server)
            if deadline is not None and time.monotonic() > deadline:
                raise on_timeout(list(self.pending))
            self._collect()

    def take(self, count: int) -> list[int]:
        """The first ``count`` ready servers (in finishing order), now waiting for actions."""
        taken = [self.ready.popleft() for _ in range(count)]
        self.idle.update(taken)
        return taken
