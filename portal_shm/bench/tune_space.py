"""What ``portal-shm tune`` chooses among: one ``Point`` per layout (envs per server, lockstep or a
batch size) and per spin and ring setting, all of them valid ``vector_kwargs`` of ``make_vec``.

The space is kept to layouts that can win on this machine: servers of equal size (divisors of
``num_envs``, plus the default size) and at most two servers per core (more only share the cores
and pay more wake-ups); async batches of whole servers (``agent.batches.server_sizes_error``)
that are smaller than ``num_envs`` and leave at most four batches in flight (smaller batches
cost the agent a ``recv`` and a ``send`` for ever fewer envs). The same function gives
``benchmarks/tune_vs_grid.py`` its exhaustive grid, so tune and the grid see one space.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Sequence

from ..agent.contract.grouping import default_envs_per_server, server_sizes, server_sizes_error
from ..agent.contract.options import DEFAULT_RING_DEPTH
from ..agent.local.spin import default_spin_wait

SERVERS_PER_CORE = 2  # most servers a default space holds per core
MAX_BATCHES_IN_FLIGHT = 4  # smallest default batch: num_envs / this
SPIN_WAITS: tuple = (None, 0.0)  # None: the portal's default (``default_spin_wait()``); 0: never spin
RING_DEPTHS: tuple = (DEFAULT_RING_DEPTH, 2)

Layout = tuple  # (envs_per_server, batch_size or None for lockstep)


@dataclass(frozen=True)
class Point:
    """One candidate: ``vector_kwargs()`` is exactly what ``make_vec`` gets for it."""

    envs_per_server: int
    batch_size: Optional[int]  # None: lockstep
    spin_wait: Optional[float]  # None: the portal's default
    ring_depth: int

    @property
    def layout(self) -> Layout:
        return (self.envs_per_server, self.batch_size)

    def vector_kwargs(self) -> dict:
        """Settings left at the portal's default are left out, so that a tuning moved to another
        machine keeps that machine's defaults (the spin default depends on the cores)."""
        kwargs: dict = {"envs_per_server": self.envs_per_server}
        if self.batch_size is not None:
            kwargs["batch_size"] = self.batch_size
        if self.spin_wait is not None:
            kwargs["spin_wait"] = self.spin_wait
        if self.ring_depth != DEFAULT_RING_DEPTH:
            kwargs["ring_depth"] = self.ring_depth
        return kwargs

    def label(self, num_envs: int) -> str:
        """``2x8 batch 8 spin 0 depth 2``: servers x envs each, then what differs from the defaults."""
        servers = math.ceil(num_envs / self.envs_per_server)
        text = f"{servers}x{self.envs_per_server} " + (
            "lockstep" if self.batch_size is None else f"batch {self.batch_size}"
        )
        if self.spin_wait is not None:
            text += f" spin {self.spin_wait * 1e6:g}us" if self.spin_wait else " spin 0"
        if self.ring_depth != DEFAULT_RING_DEPTH:
            text += f" depth {self.ring_depth}"
        return text


def default_point(num_envs: int, cores: int) -> Point:
    """``make_vec(id, num_envs)`` with no ``vector_kwargs``: the reference a tuning is compared to."""
    return Point(default_envs_per_server(num_envs, cores), None, None, DEFAULT_RING_DEPTH)


def layouts(
    num_envs: int,
    cores: int,
    batch: bool,
    envs_per_server: Optional[Sequence[int]] = None,
    batch_sizes: Optional[Sequence[int]] = None,
) -> list:
    """Every layout ``(envs_per_server, batch_size)`` of the space, lockstep first, largest servers
    first. ``envs_per_server`` and ``batch_sizes`` narrow it to the given values; batch layouts
    only with ``batch`` (a loop written for ``step()`` cannot take batches)."""
    if envs_per_server:
        sizes = sorted({int(e) for e in envs_per_server if 1 <= int(e) <= num_envs}, reverse=True)
    else:
        divisors = [d for d in range(1, num_envs + 1) if num_envs % d == 0]
        sizes = [d for d in divisors if num_envs // d <= SERVERS_PER_CORE * cores]
        sizes = sorted(set(sizes) | {default_envs_per_server(num_envs, cores)}, reverse=True)
    found: list = [(e, None) for e in sizes]
    if not batch:
        return found
    for e in sizes:
        if batch_sizes:
            candidates = sorted({int(b) for b in batch_sizes})
        else:
            candidates = [b for b in range(e, num_envs) if num_envs % b == 0 and num_envs // b <= MAX_BATCHES_IN_FLIGHT]
        for b in candidates:
            if 1 <= b < num_envs and server_sizes_error(server_sizes(num_envs, e), b, num_envs) is None:
                found.append((e, b))
    return found


def spin_waits(requested: Optional[Sequence[Optional[float]]] = None) -> list:
    """The spin settings to try; 0 is left out where the default already is 0 (one core, or a
    machine whose memory model rules spinning out): both would be the same portal."""
    values = list(dict.fromkeys(SPIN_WAITS if requested is None else requested))
    if default_spin_wait() == 0.0 and None in values and 0.0 in values:
        values.remove(0.0)
    return values


def grid(
    num_envs: int,
    cores: int,
    batch: bool,
    envs_per_server: Optional[Sequence[int]] = None,
    batch_sizes: Optional[Sequence[int]] = None,
    spins: Optional[Sequence[Optional[float]]] = None,
    ring_depths: Optional[Sequence[int]] = None,
) -> list:
    """Every point of the space: each layout with every spin setting and ring depth."""
    depths = list(dict.fromkeys(RING_DEPTHS if ring_depths is None else ring_depths))
    return [
        Point(e, b, s, d)
        for e, b in layouts(num_envs, cores, batch, envs_per_server, batch_sizes)
        for s in spin_waits(spins)
        for d in depths
    ]
