"""Vector infos as the sparse per-env dicts they were batched from, so that the far agent batches
them across hosts exactly as gymnasium would have batched them in one process.

gymnasium picks an info array's dtype from the first env that has the key (``add_info``). Two
hosts batching on their own could pick two dtypes; sending each env's own values and batching
once, in the agent, over all envs in env order, gives SyncVectorEnv's result whatever the split.
"""

from __future__ import annotations

from typing import Any, Optional

import numpy as np

from ..agent.infos import add_info
from ..errors import ServerProtocolError

# Values of these arrays cross as Python numbers: the agent's batching gives them the same dtype
# (gymnasium picks int64, float64, bool for int, float, bool), and msgpack packs them natively,
# where numpy scalars take a Python hook each way (for every value of every batch).
HOST_PREFIX = "env host "  # how texts about a host's envs start on the agent (errors and env_failure)
_NATIVE = frozenset(np.dtype(t) for t in (np.int64, np.float64, np.bool_))


def _value(array: Any, j: int) -> Any:
    value = array[j]
    # a bool array was batched from Python bools (np.bool_ values go into object arrays)
    return bool(value) if isinstance(value, np.bool_) and array.dtype == np.bool_ else value


def _mask(infos: dict, key: str) -> Optional[np.ndarray]:
    """The mask of ``key`` (which envs have it), or None when it has none; ValueError where the
    mask's place holds something else: an env's own key that starts with ``_`` (gymnasium's
    batching cannot tell the two apart, so neither can the host)."""
    mask = infos.get("_" + key)
    if mask is None:
        return None
    if not (isinstance(mask, np.ndarray) and mask.dtype == np.bool_ and mask.ndim == 1):
        raise ValueError(
            f"infos key {'_' + key!r} is both an env's key and the mask of {key!r} in gymnasium's batching: "
            "these infos cannot cross to the agent (rename info keys that start with '_')"
        )
    return mask


def _env_info(infos: dict, j: int) -> dict:
    out = {}
    for key, value in infos.items():
        if not isinstance(key, str) or (key.startswith("_") and key[1:] in infos):
            continue
        mask = _mask(infos, key)
        if mask is None or j >= len(mask) or not mask[j]:
            continue
        out[key] = _env_info(value, j) if isinstance(value, dict) else _value(value, j)
    return out


def unbatch(infos: dict, count: int, skip: tuple = ("env_id", "_env_id")) -> list:
    """``[[j, info of env j], ...]`` for the envs of a batch of ``count`` that have any info."""
    infos = {key: value for key, value in infos.items() if key not in skip}
    if not infos:
        return []
    per_env: list = [None] * count
    for key, value in infos.items():
        if not isinstance(key, str) or (key.startswith("_") and key[1:] in infos):
            continue
        mask = _mask(infos, key)
        if mask is None:
            continue
        rows = np.flatnonzero(mask[:count]).tolist()
        if isinstance(value, np.ndarray) and value.ndim == 1 and value.dtype in _NATIVE:
            values = value[rows].tolist()
        else:
            values = [_env_info(value, j) if isinstance(value, dict) else _value(value, j) for j in rows]
        for j, item in zip(rows, values):
            env_info = per_env[j]
            if env_info is None:
                env_info = per_env[j] = {}
            env_info[key] = item
    return [[j, env_info] for j, env_info in enumerate(per_env) if env_info is not None]


def batch(sparse: Any, positions: Any, total: int, what: str, infos: Optional[dict] = None, envs: Any = None) -> dict:
    """gymnasium's vector infos of a batch of ``total`` from a host's sparse per-env infos.

    ``positions[j]`` is where the host's env ``j`` sits in the batch, ``envs[j]`` its index in the
    agent's portal (default: its position); the host's list is untrusted. Hosts are added in env
    order into one ``infos``, so dtypes come out as in one process. A host's ``env_failure`` text
    names its own envs (its local portal's numbering): it is prefixed with the host and the env's
    index here, as errors from hosts are.
    """
    infos = {} if infos is None else infos
    if not isinstance(sparse, list):
        raise ServerProtocolError(f"{what} sent infos that are not a list")
    for item in sparse:
        if not (isinstance(item, list) and len(item) == 2 and isinstance(item[0], int) and isinstance(item[1], dict)):
            raise ServerProtocolError(f"{what} sent a malformed infos entry {item!r:.80}")
        j, env_info = item
        if not 0 <= j < len(positions):
            raise ServerProtocolError(f"{what} sent infos for env {j}, which is not in the batch")
        failure = env_info.get("env_failure")
        if isinstance(failure, str) and not failure.startswith(HOST_PREFIX):
            env = int(positions[j] if envs is None else envs[j])
            env_info = {**env_info, "env_failure": f"{HOST_PREFIX}{what[len('host ') :]} (envs [{env}]): {failure}"}
        try:
            infos = add_info(infos, env_info, int(positions[j]), total)
        except Exception as exc:
            raise ServerProtocolError(f"{what} sent infos that cannot be batched: {exc}") from None
    return infos
