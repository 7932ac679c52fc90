"""Observations reach torch: a tensor kept over a default batch never changes; with ``copy=False``
a tensor over the ring view is the ring's memory, under the ring's validity rule (and reported when
kept past it)."""

import warnings

import numpy as np
import pytest

import portal_shm
from portal_shm.agent.contract.kept_views import KeptViewWarning

torch = pytest.importorskip("torch")
VIEWS = {"copy": False}


def test_a_tensor_kept_over_a_default_batch_never_changes():
    envs = portal_shm.make_vec("CartPole-v1", 3, vector_kwargs={"ring_depth": 2})
    try:
        obs, _ = envs.reset(seed=0)
        tensors = [torch.from_numpy(obs)]
        copies = [tensors[0].clone()]
        for _ in range(6):
            tensors.append(torch.from_numpy(envs.step(np.ones(3, np.int64))[0]))
            copies.append(tensors[-1].clone())
        assert all(torch.equal(t, c) for t, c in zip(tensors, copies))
    finally:
        envs.close()


def test_from_numpy_shares_the_ring_memory_and_sees_the_slot_reused():
    envs = portal_shm.make_vec("CartPole-v1", 3, vector_kwargs={**VIEWS, "ring_depth": 3})
    try:
        obs, _ = envs.reset(seed=0)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # torch's note on read-only arrays
            tensor = torch.from_numpy(obs)
        assert tensor.data_ptr() == obs.ctypes.data and not obs.flags.owndata  # no copy anywhere
        kept = tensor.clone()
        for _ in range(2):  # ring_depth - 1 further steps: the tensor still holds the reset batch
            envs.step(np.ones(3, np.int64))
            assert torch.equal(tensor, kept)
        with pytest.warns(KeptViewWarning, match="still referenced"):
            latest, *_ = envs.step(np.ones(3, np.int64))  # the third step writes the same slot again
        assert latest.ctypes.data == tensor.data_ptr()
        assert torch.equal(tensor, torch.from_numpy(latest.copy())) and not torch.equal(tensor, kept)
    finally:
        envs.close()


def _tensors(obs):
    if isinstance(obs, dict):
        return {key: _tensors(value) for key, value in obs.items()}
    if isinstance(obs, tuple):
        return tuple(_tensors(value) for value in obs)
    return torch.from_numpy(obs)


def _pairs(obs, tensors):
    if isinstance(obs, dict):
        return [pair for key in obs for pair in _pairs(obs[key], tensors[key])]
    if isinstance(obs, tuple):
        return [pair for o, t in zip(obs, tensors) for pair in _pairs(o, t)]
    return [(obs, tensors)]


def test_every_leaf_of_a_nested_observation_is_shared():
    envs = portal_shm.make_vec("portal_shm.server.example_envs:NestedEnv", 2, vector_kwargs=VIEWS)
    try:
        obs, _ = envs.reset(seed=0)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            pairs = _pairs(obs, _tensors(obs))
        assert len(pairs) == 6
        for array, tensor in pairs:
            assert tensor.data_ptr() == array.ctypes.data
            assert tensor.shape == array.shape and torch.equal(tensor, torch.from_numpy(array.copy()))
    finally:
        envs.close()
