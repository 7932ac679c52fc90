"""Batching per-env infos into gymnasium's dict-of-arrays with ``_key`` masks, and back.

``add_info``: the same result as ``gymnasium.vector.VectorEnv._add_info``, written to do less per
call (it sits on the agent's critical path every step, while every env server waits): masks and
arrays are only allocated the first time a key appears in a step. ``split_infos``: the one
inverse, for whoever needs per-env dicts again (an env host sending them to its agent, SB3's
VecEnv API).
"""

from __future__ import annotations

from typing import Any, Optional

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


# Arrays of these dtypes hold what Python numbers batch to (gymnasium picks int64, float64, bool for
# int, float, bool): their values go back as Python numbers, all at once (``tolist``).
_NATIVE = frozenset(np.dtype(t) for t in (np.int64, np.float64, np.bool_))


def _mask(infos: dict[str, Any], key: str) -> Optional[np.ndarray]:
    """The mask of ``key`` (which envs have it), or None when it has none; ValueError where the
    mask's place holds something else: an env's own key that starts with ``_`` (gymnasium's
    batching cannot tell the two apart, so nothing after it can)."""
    mask = infos.get("_" + key)
    if mask is None:
        return None
    if not (isinstance(mask, np.ndarray) and mask.dtype == np.bool_ and mask.ndim == 1):
        raise ValueError(
            f"infos key {'_' + key!r} is both an env's key and the mask of {key!r} in gymnasium's batching: "
            "these infos cannot be split per env (rename info keys that start with '_')"
        )
    return mask


def _scalar(array: Any, j: int, plain: bool) -> Any:
    value = array[j]
    if isinstance(value, np.generic) and (plain or (isinstance(value, np.bool_) and array.dtype == np.bool_)):
        return value.item()  # (a bool array was batched from Python bools: np.bool_ values go into object arrays)
    return value


def split_infos(
    infos: dict[str, Any], count: int, *, plain: bool = False, unmasked: bool = False
) -> list[dict[str, Any]]:
    """``infos`` (of a batch of ``count``) as one dict per env: what each env's own info held.

    ``plain``: numpy scalars as Python numbers (what SB3's VecEnvs give); otherwise they keep their
    dtype (batching them again gives the same arrays). ``unmasked``: keys without a mask belong to
    every env (else they are left out). Masks are checked, never trusted: infos that gymnasium
    batched ambiguously are a ``ValueError``.
    """
    per_env: list[dict[str, Any]] = [{} for _ in range(count)]
    for key, value in infos.items():
        if not isinstance(key, str) or (key.startswith("_") and key[1:] in infos):
            continue
        mask = _mask(infos, key)
        if mask is None and not unmasked:
            continue
        rows = list(range(count)) if mask is None else np.flatnonzero(mask[:count]).tolist()
        if isinstance(value, dict):
            nested = split_infos(value, count, plain=plain, unmasked=unmasked)
            values = [nested[j] for j in rows]
        elif isinstance(value, np.ndarray) and value.ndim == 1 and value.dtype in _NATIVE:
            values = value[rows].tolist()
        else:
            values = [_scalar(value, j, plain) for j in rows]
        for j, item in zip(rows, values):
            per_env[j][key] = item
    return per_env
