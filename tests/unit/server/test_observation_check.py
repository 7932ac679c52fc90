"""An observation that does not fit its space is refused exactly where gymnasium's SyncVectorEnv
refuses it (a wrong shape, never broadcast; a dtype numpy casts only unsafely), as an env error
naming the env, what it returned and what the space wants; one that SyncVectorEnv accepts arrives
as SyncVectorEnv gives it. Each case runs both, on real env servers (process backend)."""

from __future__ import annotations

from typing import Any, Callable

import gymnasium as gym
import numpy as np
import pytest

import portal_shm
from portal_shm.errors import EnvError
from portal_shm.server.obs_check import LeafCheck
from testkit.compare import assert_same, snapshot
from testkit.returned_obs import CASES, ReturnsObs

SEEDS = [0, 1, 2, 3]  # envs 1 and 3 (odd seeds) return the case's value
N = len(SEEDS)
PLAIN_CASES = sorted(CASES)
BATCH_CASES = sorted(name for name, (space, _, _) in CASES.items() if not isinstance(space, gym.spaces.Dict))


def outcome(call: Callable[[], Any]) -> Any:
    """What a call gave (a copy, as ring views are reused) or the exception it raised."""
    try:
        return snapshot(call())
    except Exception as exc:
        return exc


def run(envs: Any) -> tuple:
    """(reset's outcome, step's outcome or None where reset raised)."""
    reset = outcome(lambda: envs.reset(seed=SEEDS))
    if isinstance(reset, Exception):
        return reset, None
    return reset, outcome(lambda: envs.step(np.zeros(N, np.int64)))


def assert_taken_alike(portal: tuple, sync: tuple, phase: str, case: str, env_index: int, batch: bool) -> None:
    for got, expected, name in zip(portal, sync, ("reset", "step")):
        if isinstance(expected, Exception):
            assert isinstance(got, EnvError), f"{name}: SyncVectorEnv raised {expected!r}, the portal gave {got!r}"
            assert got.phase == name == phase
            assert got.env_index == env_index
            if batch:  # (observations of different shapes are an object array in the batch: refused for its dtype)
                assert got.error_type in ("ValueError", "TypeError")
            else:
                assert got.error_type == type(expected).__name__  # ValueError (shape) or TypeError (dtype)
            assert "not fit the observation space" in got.remote_message
            space = CASES[case][0]
            if not isinstance(space, gym.spaces.Dict):
                shape = (N,) + space.shape if batch else space.shape
                assert f"want{'' if batch else 's'} shape {shape} and dtype {space.dtype}" in got.remote_message
            return
        assert not isinstance(got, Exception), f"{name}: SyncVectorEnv accepted it, the portal raised {got!r}"
        assert_same(got, expected)


@pytest.mark.parametrize("phase", ["reset", "step"])
@pytest.mark.parametrize("case", PLAIN_CASES)
def test_an_observation_is_taken_or_refused_as_sync_vector_env_takes_or_refuses_it(case, phase):
    sync_envs = gym.vector.SyncVectorEnv([lambda: ReturnsObs(case, phase)] * N)
    envs = portal_shm.make_vec(
        "testkit.returned_obs:ReturnsObs", N, case=case, phase=phase, vector_kwargs={"envs_per_server": 2}
    )
    try:
        sync = run(sync_envs)
        portal = run(envs)
    finally:
        envs.close()
        sync_envs.close()
    refused = any(isinstance(result, Exception) for result in sync)
    assert refused is not CASES[case][2], f"SyncVectorEnv {'refuses' if refused else 'accepts'} {case!r}"
    assert_taken_alike(portal, sync, phase, case, env_index=1, batch=False)


@pytest.mark.parametrize("phase", ["reset", "step"])
@pytest.mark.parametrize("case", BATCH_CASES)
def test_a_native_batch_s_observations_are_taken_or_refused_as_sync_vector_env_takes_or_refuses_them(case, phase):
    """A native batch returns all its envs' observations in one array: the server checks that array
    (an error fails the batch, reported as its first env's, as every native error is)."""
    sync_envs = gym.vector.SyncVectorEnv([lambda: ReturnsObs(case, phase)] * N)
    envs = portal_shm.make_vec(
        "testkit.returned_obs:returns_obs_batch", N, case=case, phase=phase, vector_kwargs={"envs_per_server": N}
    )
    try:
        assert envs.stats()["servers"][0]["hosting"] == "testkit.returned_obs"
        sync = run(sync_envs)
        portal = run(envs)
    finally:
        envs.close()
        sync_envs.close()
    assert_taken_alike(portal, sync, phase, case, env_index=0, batch=True)


def test_the_error_names_the_env_what_it_returned_and_what_the_space_wants():
    envs = portal_shm.make_vec("testkit.returned_obs:ReturnsObs", 2, case="300.7 for a uint8 Box")
    try:
        envs.reset(seed=[0, 1])
        with pytest.raises(EnvError) as error:
            envs.step(np.zeros(2, np.int64))
    finally:
        envs.close()
    text = str(error.value)
    assert "env 1 raised TypeError in step" in text
    assert "the env returned ndarray array([300.7, 1. ]) (shape (2,), dtype float64)" in text
    assert "the space wants shape (2,) and dtype uint8" in text
    assert "casting 'same_kind'" in text


@pytest.mark.parametrize(
    "value",
    [np.zeros(4, np.float32), np.zeros(4), [1, 2, 3, 4], np.ma.array(np.ones(4, np.float16))],
    ids=["exact", "float64", "list", "masked float16"],
)
def test_a_leaf_check_returns_what_numpy_writes_as_sync_vector_env_s_stack_writes_it(value):
    check = LeafCheck((4,), np.float32)
    ring, batch = np.zeros((1, 4), np.float32), np.zeros((1, 4), np.float32)
    ring[0] = check(value)
    np.stack([value], out=batch)
    assert_same(ring, batch)
    if isinstance(value, np.ndarray) and value.dtype == np.float32:
        assert check(value) is value  # the fast path: no conversion
