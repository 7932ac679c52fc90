"""Vector infos as the sparse per-env dicts they were batched from, so that the far agent batches
them across hosts exactly as gymnasium would have batched them in one process.

gymnasium picks an info array's dtype from the first env that has the key (``add_info``). Two
hosts batching on their own could pick two dtypes; sending each env's own values and batching
once, in the agent, over all envs in env order, gives SyncVectorEnv's result whatever the split.
"""

from __future__ import annotations

from typing import Any, Optional

from ..agent.contract.infos import add_info, split_infos
from ..errors import InfoEncodingError, ServerProtocolError
from ..wire.info_codec import InfoRefused, check_crossing

HOST_PREFIX = "env host "  # how texts about a host's envs start on the agent (errors and env_failure)


def unbatch(infos: dict[str, Any], count: int, skip: tuple[Any, ...] = ("env_id", "_env_id")) -> list[Any]:
    """``[[j, info of env j], ...]`` for the envs of a batch of ``count`` that have any info."""
    infos = {key: value for key, value in infos.items() if key not in skip}
    if not infos:
        return []
    return [[j, env_info] for j, env_info in enumerate(split_infos(infos, count)) if env_info]


def batch(
    sparse: Any, positions: Any, total: int, what: str, infos: Optional[dict[str, Any]] = None, envs: Any = None
) -> dict[str, Any]:
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


def crossing(sparse: list[Any], lossy: bool, phase: str, env_ids: Any = None) -> list[Any]:
    """A host's sparse infos (``unbatch``) as they may cross to its agent, a trust boundary: what
    msgpack carries exactly as it is, the rest converted when the agent asked for ``lossy`` infos,
    else an ``InfoEncodingError`` naming the env (the host's index: ``env_ids[j]`` in a batch) and
    the value's key. Its local portal may have unpickled such values (process runtimes)."""
    out = []
    for j, env_info in sparse:
        try:
            out.append([j, check_crossing(j, env_info, lossy)])
        except InfoRefused as exc:
            env = int(env_ids[j]) if env_ids is not None else j
            d = exc.detail
            raise InfoEncodingError(
                env, phase, d["key"], d["what"], d["hint"], d["cause"], "env host", d["reason"]
            ) from None
    return out
