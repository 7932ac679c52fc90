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

import os
import time
import warnings
from collections import deque
from typing import Callable, Optional

import numpy as np

from ...wire.doorbell import AnyDone, spin_until
from ...wire.layout import STATUS, STATUS_PENDING
from ...wire.payoff import SpinPayoff
from .session import group_envs
from .spec import EnvSpec

_WAIT_SLICE = 0.05


def server_sizes_error(sizes: list[int], batch_size: int, num_envs: int) -> Optional[str]:
    """Why these server sizes cannot serve batches of ``batch_size`` envs (None when they can)."""
    if len(set(sizes)) != 1 or batch_size % sizes[0]:
        return (
            f"batch_size={batch_size} must be a multiple of the envs per server, and all servers must host "
            f"the same number of envs; the envs were grouped into servers of {sorted(set(sizes))} envs. "
            f"Pass envs_per_server=D for a divisor D of both batch_size and num_envs={num_envs}"
        )
    return None


def batch_grouping(specs: list[EnvSpec], batch_size: int, envs_per_server: Optional[int]) -> int:
    """The envs per server that serve batches of ``batch_size`` (in range: ``VectorOptions``): checked,
    or the default one."""
    num_envs = len(specs)
    if envs_per_server is None:
        cores = os.cpu_count() or 1
        envs_per_server = default_envs_per_server(num_envs, batch_size, cores)
        crowded = crowding_warning(num_envs, batch_size, envs_per_server, cores)
        if crowded:
            warnings.warn(crowded, UserWarning, stacklevel=4)
    sizes = [len(group) for group in group_envs(specs, envs_per_server)]
    problem = server_sizes_error(sizes, batch_size, num_envs)
    if problem:
        raise ValueError(problem)
    return envs_per_server


def crowding_warning(num_envs: int, batch_size: int, envs_per_server: int, cores: int) -> Optional[str]:
    """What to say when ``batch_size`` and ``num_envs`` force smaller servers than the batch allows
    (they share no larger divisor), so that more env servers than cores compete for the CPU."""
    target = -(-num_envs // cores)
    servers = num_envs // envs_per_server
    if servers <= cores or envs_per_server >= min(batch_size, target):
        return None

    def layout(b: int) -> int:
        return default_envs_per_server(num_envs, b, cores)

    fitting = [b for b in range(2, num_envs) if layout(b) == min(b, target) and num_envs // layout(b) < servers]
    better = min(fitting, key=lambda b: (abs(b - batch_size), -b)) if fitting else None
    hint = (
        f"batch_size={better} lets {num_envs // layout(better)} servers hold {layout(better)} envs each; "
        if better is not None
        else ""
    )
    return (
        f"batch_size={batch_size} with num_envs={num_envs}: a batch is made of whole env servers, and only "
        f"servers of {envs_per_server} env(s) divide both, so {servers} env servers share {cores} CPU cores "
        f"(slower than one server per core). {hint}or pass envs_per_server=D to choose the layout yourself"
    )


def default_envs_per_server(num_envs: int, batch_size: int, cores: int) -> int:
    """The largest divisor of both ``batch_size`` and ``num_envs`` that still spreads over the cores."""
    target = max(1, -(-num_envs // cores))
    return max(d for d in range(1, batch_size + 1) if batch_size % d == 0 and num_envs % d == 0 and d <= target)


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
