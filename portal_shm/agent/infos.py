"""Batching per-env infos into gymnasium's dict-of-arrays with ``_key`` masks.

Same result as ``gymnasium.vector.VectorEnv._add_info``, written to do less per call (it sits on
the agent's critical path every step, while every env server waits): masks and arrays are only
allocated the first time a key appears in a step.
"""

from __future__ import annotations

from typing import Any

import numpy as np

_SCALARS = (int, float, bool)


def add_info(vector_infos: dict[str, Any], env_info: dict[str, Any], env_num: int, num_envs: int) -> dict[str, Any]:
    """Add env ``env_num``'s info dict into ``vector_infos`` (mutated and returned)."""
    for key, value in env_info.items():
        if key == "final_obs":
            array = vector_infos.get(key)
            if array is None:
                array = np.full(num_envs, fill_value=None, dtype=object)
            array[env_num] = value
        elif isinstance(value, dict):
            array = add_info(vector_infos.get(key, {}), value, env_num, num_envs)
        else:
            if key in vector_infos:
                array = vector_infos[key]
            else:
                kind = type(value)
                if kind in _SCALARS or issubclass(kind, np.number):
                    array = np.zeros(num_envs, dtype=kind)
                elif isinstance(value, np.ndarray):
                    array = np.zeros((num_envs, *value.shape), dtype=value.dtype)
                else:
                    array = np.full(num_envs, fill_value=None, dtype=object)
            array[env_num] = value
        mask_key = "_" + key
        mask = vector_infos.get(mask_key)
        if mask is None:
            mask = np.zeros(num_envs, dtype=np.bool_)
        mask[env_num] = True
        vector_infos[key] = array
        vector_infos[mask_key] = mask
    return vector_infos
