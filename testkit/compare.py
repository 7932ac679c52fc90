"""Exact structural comparison of gymnasium results: same types, dtypes, shapes and values."""

from __future__ import annotations

from typing import Any

import numpy as np


def assert_same(actual: Any, expected: Any, path: str = "result") -> None:
    if isinstance(expected, dict):
        assert isinstance(actual, dict), f"{path}: {type(actual)} is not a dict"
        assert set(actual) == set(expected), f"{path}: keys {sorted(actual)} != {sorted(expected)}"
        for key in expected:
            assert_same(actual[key], expected[key], f"{path}[{key!r}]")
    elif isinstance(expected, (tuple, list)):
        assert type(actual) is type(expected), f"{path}: {type(actual)} != {type(expected)}"
        assert len(actual) == len(expected), f"{path}: length {len(actual)} != {len(expected)}"
        for index, (a, e) in enumerate(zip(actual, expected)):
            assert_same(a, e, f"{path}[{index}]")
    elif isinstance(expected, np.ndarray):
        assert isinstance(actual, np.ndarray), f"{path}: {type(actual)} is not an ndarray"
        assert actual.dtype == expected.dtype, f"{path}: dtype {actual.dtype} != {expected.dtype}"
        assert actual.shape == expected.shape, f"{path}: shape {actual.shape} != {expected.shape}"
        if expected.dtype == object:
            for index in np.ndindex(expected.shape):
                assert_same(actual[index], expected[index], f"{path}{list(index)}")
        else:
            assert np.array_equal(actual, expected, equal_nan=expected.dtype.kind in "fc"), f"{path}: values differ"
    else:
        assert type(actual) is type(expected), f"{path}: {type(actual)} != {type(expected)}"
        assert actual == expected or (actual != actual and expected != expected), f"{path}: {actual!r} != {expected!r}"


def snapshot(value: Any) -> Any:
    """A deep copy that detaches ring views (results must be kept past the ring's depth)."""
    if isinstance(value, np.ndarray):
        return value.copy()
    if isinstance(value, dict):
        return {k: snapshot(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return tuple(snapshot(v) for v in value)
    return value


def without_recycled(records: list) -> list:
    """``records`` (a reset's snapshot, then the steps') without the ``env_recycled`` infos of the
    steps, which the same run without recycling does not have; changed in place and returned."""
    for record in records[1:]:
        record[4].pop("env_recycled", None), record[4].pop("_env_recycled", None)
    return records


def kept(value: Any) -> Any:
    """The result as the portal returned it: no copy (a client that keeps references)."""
    return value


def rollout(envs: Any, steps: int, seed: int, mode: str, keep: Any = snapshot) -> list:
    """Seeded rollout with seeded random actions; in Disabled mode, finished envs are reset by mask.

    ``keep``: how each result is recorded (a copy; ``kept`` holds what the portal returned as it is,
    as a client holding references does)."""
    envs.action_space.seed(seed)
    records = [keep(envs.reset(seed=seed))]
    for _ in range(steps):
        actions = envs.action_space.sample()
        result = envs.step(actions)
        records.append(keep(result))
        _, _, terminated, truncated, _ = result
        done = np.logical_or(terminated, truncated)
        if mode == "Disabled" and done.any():
            records.append(keep(envs.reset(options={"reset_mask": done.copy()})))
    return records


def row(value, j):
    """Env ``j`` of a batched value, kept as a batch of one."""
    if isinstance(value, dict):
        return {key: row(sub, j) for key, sub in value.items()}
    if isinstance(value, tuple):
        return tuple(row(sub, j) for sub in value)
    return value[j : j + 1]


def info_row(infos, j):
    """Env ``j``'s entries of batched infos, as a one-env vector env would batch them."""
    out = {}
    for key, value in infos.items():
        mask = infos.get("_" + key)
        if key.startswith("_") or key == "env_id" or mask is None or not mask[j]:
            continue
        out[key] = info_row(value, j) if isinstance(value, dict) else value[j : j + 1]
        out["_" + key] = mask[j : j + 1]
    return out


def check_batch(result, expected_by_env):
    """Each env of the batch shows what its replica returned last: a reset (obs, infos) or a step."""
    obs, reward, terminated, truncated, infos = result
    for j, env_id in enumerate(infos["env_id"].tolist()):
        expected = expected_by_env.pop(env_id)
        assert_same(row(obs, j), expected[0], f"obs of env {env_id}")
        assert_same(info_row(infos, j), info_row(expected[-1], 0), f"infos of env {env_id}")
        if len(expected) == 5:
            assert_same((row(reward, j), row(terminated, j), row(truncated, j)), expected[1:4])


def follow_each_env(envs, expected_envs, seed: int, steps: int, after=None) -> set:
    """Async batches (``send``/``recv``) checked env by env against each env's own one-env
    SyncVectorEnv in ``expected_envs``, random actions; returns the env ids that came back.
    ``after(result)``: called with each batch once it was checked (a client writing into it)."""
    expected = {i: env.reset(seed=seed + i) for i, env in enumerate(expected_envs)}
    obs, infos = envs.reset(seed=seed)
    check_batch((obs, None, None, None, infos), expected)
    if after is not None:
        after((obs, infos))
    envs.action_space.seed(seed)
    ids = infos["env_id"]
    seen = set(ids.tolist())
    for _ in range(steps):
        actions = envs.action_space.sample()
        envs.send(actions, ids)
        for j, env_id in enumerate(ids.tolist()):
            expected[env_id] = expected_envs[env_id].step(actions[j : j + 1])
        result = envs.recv()
        check_batch(result, expected)
        if after is not None:
            after(result)
        ids = result[4]["env_id"]
        seen.update(ids.tolist())
    return seen
