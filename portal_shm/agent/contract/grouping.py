"""How a portal's envs are grouped onto env servers: how many envs a server hosts, and which.

One decision, made here for every place that needs it: the local portal that starts the servers
(``agent/local/session.py``), an env host that sizes a session's servers against its quotas, and
``portal-shm tune``, which lists the layouts ``make_vec`` can make.

- Envs go to servers in order, ``envs_per_server`` to a server; a server closes early where a
  backend caps its envs (``Backend.max_envs_per_server``) or where the next env cannot share it
  (another backend, id or kwargs).
- Left to the portal, ``envs_per_server`` spreads the envs over the cores, one server per core. With
  async batches (``batch_size`` below ``num_envs``) a batch is made of whole servers, so every
  server holds the same number of envs, a divisor of both ``batch_size`` and ``num_envs``: by
  default the largest one that still spreads over the cores. gymnasium's ``max_concurrency`` caps
  the servers (a server steps one env at a time).
"""

from __future__ import annotations

import math
import os
import warnings
from typing import Callable, Optional, Sequence

# (env i, first env of the open server) -> whether env i may join that server
Shares = Callable[[int, int], bool]


def machine_cores() -> int:
    """The cores the default layouts spread servers over."""
    return os.cpu_count() or 1


def default_envs_per_server(num_envs: int, cores: int) -> int:
    """Lockstep's default: one server per core (one env each where there are fewer envs than cores)."""
    return math.ceil(num_envs / min(num_envs, cores))


def batch_envs_per_server(num_envs: int, batch_size: int, cores: int) -> int:
    """Async batches' default: the largest divisor of both ``batch_size`` and ``num_envs`` that still
    spreads over the cores."""
    target = max(1, -(-num_envs // cores))
    return max(d for d in range(1, batch_size + 1) if batch_size % d == 0 and num_envs % d == 0 and d <= target)


def envs_per_server(
    num_envs: int,
    requested: Optional[int] = None,
    *,
    batch_size: Optional[int] = None,
    max_concurrency: Optional[int] = None,
    cores: Optional[int] = None,
    stacklevel: Optional[int] = 1,
) -> int:
    """The envs a server hosts: ``requested``, else the default (lockstep's, or async batches' where
    ``batch_size`` is below ``num_envs``, warning where that crowds the cores: ``stacklevel`` 1
    names the caller's line, as ``warnings.warn`` counts; None: no warning); then at most ``max_concurrency``
    servers. Whether the servers fit the batches is ``check_batches``'s. The values are checked
    ones (``VectorOptions``): positive, ``batch_size`` at most ``num_envs``."""
    cores = cores or machine_cores()
    per = requested
    if per is None and batch_size is not None and batch_size < num_envs:
        per = batch_envs_per_server(num_envs, batch_size, cores)
        crowded = crowding_warning(num_envs, batch_size, per, cores)
        if crowded and stacklevel is not None:
            warnings.warn(crowded, UserWarning, stacklevel=stacklevel + 1)
    if per is None:
        per = default_envs_per_server(num_envs, cores)
    if max_concurrency is not None:
        per = max(per, math.ceil(num_envs / max_concurrency))
    return per


def group_envs(
    num_envs: int,
    envs_per_server: int,
    limits: Sequence[Optional[int]] = (),
    shares: Optional[Shares] = None,
) -> list[list[int]]:
    """The env indices of each server: consecutive envs, ``envs_per_server`` to a server, fewer where
    ``limits[i]`` (env i's backend's cap, None: none) or ``shares`` (whether env i may join the
    server its first env opened; default: every env may) close a server early."""
    groups: list[list[int]] = []
    for i in range(num_envs):
        limit = limits[i] if i < len(limits) else None
        if (
            groups
            and (shares is None or shares(i, groups[-1][0]))
            and len(groups[-1]) < min(envs_per_server, limit or envs_per_server)
        ):
            groups[-1].append(i)
        else:
            groups.append([i])
    return groups


def server_sizes(num_envs: int, envs_per_server: int) -> list[int]:
    """The servers' sizes of envs that all share: full servers, then the rest."""
    return [len(group) for group in group_envs(num_envs, envs_per_server)]


def server_count(
    num_envs: int, requested: Optional[int] = None, batch_size: Optional[int] = None, cores: Optional[int] = None
) -> int:
    """The servers a portal of ``num_envs`` like envs starts (what an env host's quotas count)."""
    per = envs_per_server(num_envs, requested, batch_size=batch_size, cores=cores, stacklevel=None)
    return len(server_sizes(num_envs, per))


def server_sizes_error(sizes: list[int], batch_size: int, num_envs: int) -> Optional[str]:
    """Why these server sizes cannot serve batches of ``batch_size`` envs (None when they can)."""
    if len(set(sizes)) != 1 or batch_size % sizes[0]:
        return (
            f"batch_size={batch_size} must be a multiple of the envs per server, and all servers must host "
            f"the same number of envs; the envs were grouped into servers of {sorted(set(sizes))} envs. "
            f"Pass envs_per_server=D for a divisor D of both batch_size and num_envs={num_envs}"
        )
    return None


def check_batches(groups: list[list[int]], batch_size: Optional[int], num_envs: int) -> None:
    """Raises ``ValueError`` where the servers cannot serve batches of ``batch_size`` (None: lockstep)."""
    if batch_size is None or batch_size >= num_envs:
        return
    problem = server_sizes_error([len(group) for group in groups], batch_size, num_envs)
    if problem:
        raise ValueError(problem)


def crowding_warning(num_envs: int, batch_size: int, envs_per_server: int, cores: int) -> Optional[str]:
    """What to say when ``batch_size`` and ``num_envs`` force smaller servers than the batch allows
    (they share no larger divisor), so that more env servers than cores compete for the CPU."""
    target = -(-num_envs // cores)
    servers = num_envs // envs_per_server
    if servers <= cores or envs_per_server >= min(batch_size, target):
        return None

    def layout(b: int) -> int:
        return batch_envs_per_server(num_envs, b, cores)

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


def plan_servers(
    num_envs: int,
    requested: Optional[int] = None,
    *,
    batch_size: Optional[int] = None,
    max_concurrency: Optional[int] = None,
    limits: Sequence[Optional[int]] = (),
    shares: Optional[Shares] = None,
    stacklevel: int = 1,
) -> list[list[int]]:
    """The whole decision in one call: the envs per server (``envs_per_server``), the groups
    (``group_envs``), checked against the batches (``check_batches``: ``ValueError``)."""
    per = envs_per_server(
        num_envs, requested, batch_size=batch_size, max_concurrency=max_concurrency, stacklevel=stacklevel + 1
    )
    groups = group_envs(num_envs, per, limits, shares)
    check_batches(groups, batch_size, num_envs)
    return groups
