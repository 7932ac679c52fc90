"""Which of a local portal's envs share an env server: ``contract/grouping.py``'s decision over
``EnvSpec``s (consecutive envs that ``shares_server_with`` each other, within their backends' caps)."""

from __future__ import annotations

from typing import Optional, Sequence

from ..contract import grouping
from .spec import EnvSpec


def plan_groups(
    specs: Sequence[EnvSpec],
    envs_per_server: Optional[int],
    *,
    batch_size: Optional[int] = None,
    max_concurrency: Optional[int] = None,
    stacklevel: int = 1,
) -> list[list[int]]:
    """The env indices of each server, as ``contract/grouping.py`` decides (``plan_servers``):
    consecutive envs with equal specs share a server, within their backends' caps; by default one
    server per CPU core, or the layout of ``batch_size``'s async batches (checked: ``ValueError``)."""
    return grouping.plan_servers(
        len(specs),
        envs_per_server,
        batch_size=batch_size,
        max_concurrency=max_concurrency,
        limits=[spec.backend.max_envs_per_server() for spec in specs],
        shares=lambda i, first: specs[i].shares_server_with(specs[first]),
        stacklevel=stacklevel + 1,
    )


def group_envs(specs: Sequence[EnvSpec], envs_per_server: Optional[int]) -> list[list[int]]:
    """The env indices of each server of a lockstep portal (``plan_groups``)."""
    return plan_groups(specs, envs_per_server)
