"""The checks every portal kind makes of a call's arguments, written once: env indices, per-env
values, seeds and gymnasium's ``reset_mask`` (with gymnasium's own errors)."""

from __future__ import annotations

from typing import Any, Optional

import numpy as np


def check_env_ids(env_ids: Any, num_envs: int) -> list[int]:
    """The env indices a per-env call names, checked as every portal kind checks them."""
    try:
        ids = [int(i) for i in np.asarray(env_ids).reshape(-1)]
    except (TypeError, ValueError):
        raise TypeError(f"env_ids must be env indices (ints), got {env_ids!r:.80}") from None
    if not ids:
        raise ValueError("env_ids names no env: give at least one index")
    if min(ids) < 0 or max(ids) >= num_envs or len(set(ids)) != len(ids):
        raise ValueError(f"env_ids must be distinct env indices in [0, {num_envs}), got {ids}")
    return ids


def per_env_values(values: Any, count: int) -> list[Any]:
    """``set_attr``'s values: one for all envs, or a list or tuple of one per env."""
    if not isinstance(values, (list, tuple)):
        return [values] * count
    if len(values) != count:
        raise ValueError(
            "Values must be a list or tuple with length equal to the number of environments. "
            f"Got `{len(values)}` values for {count} environments."
        )
    return list(values)


def check_reset_mask(mask: Any, num_envs: int) -> np.ndarray:
    """``options["reset_mask"]`` as gymnasium's vector envs take it, with their errors."""
    if not isinstance(mask, np.ndarray):
        raise TypeError(f"`options['reset_mask']` must be a numpy array, got {type(mask)}")
    if mask.shape != (num_envs,):
        raise ValueError(f"`options['reset_mask']` must have shape `({num_envs},)`, got {mask.shape}")
    if mask.dtype != np.bool_:
        raise TypeError(f"`options['reset_mask']` must have `dtype=np.bool_`, got {mask.dtype}")
    if not np.any(mask):
        raise ValueError(
            f"`options['reset_mask']` must contain a boolean array with at least one True value, got reset_mask={mask}"
        )
    return mask


def reset_options(options: Optional[dict[str, Any]], num_envs: int, batched: bool) -> tuple[Any, Any]:
    """``reset``'s options without ``reset_mask``, and the mask checked as gymnasium checks it (None
    when there is none); the caller's dict is left as it was."""
    if options is None or "reset_mask" not in options:
        return options, None
    options = dict(options)
    mask = check_reset_mask(options.pop("reset_mask"), num_envs)
    if batched:
        raise ValueError(
            "options['reset_mask'] is not supported with batch_size: reset(seed=...) resets every "
            "env and recv() then hands them out batch by batch"
        )
    return options, mask


def seed_list(seed: int | list[int | None] | None, num_envs: int) -> list[int | None]:
    """One seed per env as gymnasium's vector envs take them: None, ``seed + i``, or a list of N."""
    seeds: list[int | None]
    if seed is None:
        seeds = [None] * num_envs
    elif isinstance(seed, (int, np.integer)):
        seeds = [int(seed) + i for i in range(num_envs)]
    else:
        seeds = list(seed)
    if len(seeds) != num_envs:
        raise ValueError(
            f"If seeds are passed as a list the length must match num_envs={num_envs} but got length={len(seeds)}."
        )
    return seeds
