"""A batch of actions checked against the action space, leaf by leaf: one rule for every portal.

The local ring, async batches and a remote host all take a batch of ``count`` actions as the
arrays of the space's leaves (``portal_shm.wire.trees``); a batch of the wrong shape is refused
before any env sees it, with the same error on every kind.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium.spaces import Space

from ...wire import trees
from ...wire.schema import leaves


class ActionLeaves:
    """Splits batches of actions of one fixed-layout space into checked leaf arrays."""

    def __init__(self, schema: dict[str, Any], single_space: Space[Any]) -> None:
        self.single_space = single_space
        self.nested = schema["kind"] in ("Dict", "Tuple")
        self.paths = [path for path, _ in leaves(schema)]
        self.specs = trees.leaf_specs(schema)

    def arrays(self, actions: Any, count: int) -> list[np.ndarray]:
        """The leaves of ``count`` envs' ``actions`` as arrays of shape ``(count,) + leaf shape``.

        Raises ``TypeError`` for a scalar where one action per env is due, ``ValueError`` for any
        other shape; whoever writes the values casts them to each leaf's dtype.
        """
        values = [trees.at(actions, path) for path in self.paths] if self.nested else [actions]
        arrays = [np.asarray(value) for value in values]
        for array, (shape, _) in zip(arrays, self.specs):
            if array.shape[:1] != (count,) or array.shape[1:] != shape:
                expected = (count,) + shape
                if array.ndim == 0 < len(expected):
                    raise TypeError(
                        f"actions must hold one action per env (shape {expected}), got the scalar {array.item()!r}"
                    )
                raise ValueError(
                    f"actions of shape {array.shape} do not match {count} envs of the action space "
                    f"{self.single_space} (expected shape {expected})"
                )
        return arrays
