"""The arrays of a remote portal's messages: actions split per host, replies checked and joined.

Everything a host sends is checked against the spaces it announced (each leaf's dtype and shape,
the flags' count); observations and flags of several hosts are concatenated in env order and
infos batched once, here, over all envs in order, as one SyncVectorEnv would batch them.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

import numpy as np
from gymnasium.spaces import Space

from ...agent.contract.actions import ActionLeaves
from ...errors import PortalError, ServerProtocolError
from ...wire import trees
from ...wire.schema import is_fixed
from .. import frames
from ..infos import batch as batch_infos
from .hosts import RemoteHost

#: One host's reply: (host, header, arrays).
Reply = tuple[RemoteHost, dict[str, Any], list[Any]]


class HostArrays:
    """The layout of the portal's spaces, and the encoding and decoding of their arrays."""

    def __init__(self, obs_schema: Any, act_schema: Any, action_space: Space[Any], copy: bool) -> None:
        self.obs_schema, self.act_schema = obs_schema, act_schema
        self.obs_fixed, self.act_fixed = is_fixed(obs_schema), is_fixed(act_schema)
        self.obs_specs = trees.leaf_specs(obs_schema) if self.obs_fixed else []
        self.act_specs = trees.leaf_specs(act_schema) if self.act_fixed else []
        self.actions = ActionLeaves(act_schema, action_space) if self.act_fixed else None
        self.copy = copy

    def split_actions(self, actions: Any, count: int, parts: int, rows_of: Callable[[int], slice]) -> list[Any]:
        """Per part (a host): (header fields, arrays) of its envs' actions; ``count`` actions in all."""
        if self.actions is None:
            values = list(actions)
            return [({"actions": values[rows_of(i)]}, []) for i in range(parts)]
        arrays = [
            array.astype(dtype, copy=False)
            for array, (_, dtype) in zip(self.actions.arrays(actions, count), self.act_specs)
        ]
        return [({}, [a[rows_of(i)] for a in arrays]) for i in range(parts)]

    def observations(self, replies: list[Reply], counts: list[int], every_host: bool) -> Any:
        """The observations of ``replies`` (``counts`` envs each) in env order; ``every_host``: a
        lockstep reply of all hosts, which each host keeps as what a masked reset of it shows."""
        if not self.obs_fixed:
            parts = [header.get("obs") for _, header, _ in replies]
            if len(parts) == 1:
                replies[0][0].last_obs_value = parts[0]
                return parts[0]
            raise PortalError("observation spaces without a fixed layout are served by one host at a time")
        per_host = []
        for (host, _, data), count in zip(replies, counts):
            per_host.append(self.checked_obs(host, data, count))
            if every_host:
                host.last_obs = per_host[-1]
        if len(per_host) == 1 and not self.copy:
            columns = per_host[0]
        else:
            columns = [np.concatenate(parts) for parts in zip(*per_host)]
        return trees.unflatten(columns, self.obs_schema)

    def checked_obs(self, host: RemoteHost, data: list[Any], count: int) -> list[Any]:
        """The observation leaves of a host's reply, each checked against the announced space."""
        if len(data) < len(self.obs_specs):
            raise ServerProtocolError(
                f"host {host.address} sent {len(data)} arrays for {len(self.obs_specs)} observation leaves"
            )
        return [
            frames.expect(a, dtype, (count,) + shape, f"host {host.address}'s observation")
            for a, (shape, dtype) in zip(data, self.obs_specs)
        ]

    def flags(self, replies: list[Reply], counts: list[int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Rewards, terminations and truncations of ``replies`` in env order."""
        n = len(self.obs_specs) if self.obs_fixed else 0
        out = []
        for position, dtype in ((0, np.dtype(np.float64)), (1, np.dtype(np.bool_)), (2, np.dtype(np.bool_))):
            parts = []
            for (host, _, data), count in zip(replies, counts):
                if len(data) != n + 3:
                    raise ServerProtocolError(f"host {host.address} sent {len(data)} arrays, expected {n + 3}")
                parts.append(frames.expect(data[n + position], dtype, (count,), f"host {host.address}'s flags"))
            out.append(parts[0] if len(parts) == 1 and not self.copy else np.concatenate(parts))
        return out[0], out[1], out[2]

    @staticmethod
    def infos(replies: list[Reply], total: int, envs: Optional[np.ndarray] = None) -> dict[str, Any]:
        """All replies' infos batched in env order, as one SyncVectorEnv would batch them (``envs``:
        the portal's indices of a batch's rows, for the texts)."""
        infos: dict[str, Any] = {}
        for host, header, _ in replies:
            rows = np.arange(total) if envs is not None else np.arange(host.offset, host.offset + host.num_envs)
            infos = batch_infos(header.get("infos", []), rows, total, f"host {host.address}", infos, envs=envs)
        return infos
