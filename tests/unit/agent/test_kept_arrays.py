"""What a client keeps of a batch: fresh arrays by default, and views it must not keep with copy=False.

The default (``copy=True``) hands out arrays that never change: ``tests/contract`` checks that on
every portal kind by keeping every result of a rollout. Here: the opt-in views are writable, as
AsyncVectorEnv's ``copy=False`` arrays are (a write lands in that slot only), a view still referenced
when its ring slot is written again is reported once (``KeptViewWarning``, at the client's line), and
a loop that only rebinds (or writes into) what it was handed is never reported.
"""

import warnings

import gymnasium as gym
import numpy as np
import pytest
import torch

import portal_shm
from portal_shm.agent.contract.kept_views import KeptViews, KeptViewWarning, anchored, holders

VIEWS = {"copy": False}


@pytest.mark.parametrize(
    "keep",
    [
        lambda obs: obs,
        lambda obs: obs[1:],
        lambda obs: obs[:, 0].reshape(-1),
        lambda obs: torch.from_numpy(obs),
        lambda obs: torch.as_tensor(obs[0]),
        lambda obs: memoryview(obs),
    ],
    ids=["itself", "slice", "slice-of-slice", "from_numpy", "as_tensor-of-row", "memoryview"],
)
def test_every_way_of_holding_a_view_is_seen_when_its_memory_is_reused(keep):
    ring = np.zeros((4, 3, 5))
    slots = [anchored(ring[k]) for k in range(4)]
    kept = KeptViews("ring slot", "3 further calls")
    for k in range(4):
        kept.watch(k, holders([slots[k]]))
        kept.settle(k)
    held = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", KeptViewWarning)
        warnings.simplefilter("ignore", UserWarning)  # torch's note on read-only arrays
        for step in range(12):
            kept.check(step % 4)
            if step == 2:
                held.append(keep(slots[step % 4]))
            assert (len(caught) == 1) == (step >= 6), f"step {step}: {[str(w.message) for w in caught]}"
    assert issubclass(caught[0].category, KeptViewWarning)
    assert "copy" in str(caught[0].message) and "ring slot" in str(caught[0].message)


def test_copies_and_dropped_views_are_not_reported():
    ring = np.zeros((2, 3))
    slots = [anchored(ring[k]) for k in range(2)]
    kept = KeptViews("ring slot", "1 further call")
    for k in range(2):
        kept.watch(k, holders([slots[k]]))
        kept.settle(k)
    copies = []
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for step in range(10):
            kept.check(step % 2)
            obs = slots[step % 2]
            copies.append((np.array(obs), torch.tensor(obs), obs.copy(), obs[0].copy()))
            view = obs[1:]
            view[0] = step  # a write in place holds nothing past the line
            del view
    assert slots[0].flags.writeable and slots[0][1:].flags.writeable
    assert ring[1, 1] == 9.0  # the last write (step 9, slot 1), in the ring's own memory


@pytest.mark.parametrize("vector_kwargs", [{}, {"batch_size": 2}], ids=["lockstep", "batches"])
def test_the_default_returns_fresh_writable_arrays(vector_kwargs):
    envs = portal_shm.make_vec("CartPole-v1", 4, vector_kwargs=vector_kwargs)
    try:
        obs, infos = envs.reset(seed=0)
        if vector_kwargs:
            envs.send(np.zeros(2, np.int64), infos["env_id"])
            obs, reward, terminated, truncated, _ = envs.recv()
        else:
            obs, reward, terminated, truncated, _ = envs.step(np.zeros(4, np.int64))
        for array in (obs, reward, terminated, truncated):
            assert array.flags.writeable
        for array in (reward, terminated, truncated):
            assert array.flags.owndata
        # The observations: fresh arrays, or (lockstep) a private copy-on-write mapping of the slot
        # (``private_slots.py``): the client's own either way; writing touches nothing of the portal's.
        obs[:] = 0
        assert envs.copy is True
    finally:
        envs.close()


def test_vector_portal_of_env_fns_copies_as_async_vector_env_does():
    envs = portal_shm.VectorPortal([lambda: gym.make("CartPole-v1")] * 2)
    try:
        assert envs.copy is True
        obs, _ = envs.reset(seed=0)
        seen = obs.copy()
        assert obs.flags.writeable
        for _ in range(3 * envs.ring_depth):
            envs.step(np.zeros(2, np.int64))
        np.testing.assert_array_equal(obs, seen)
    finally:
        envs.close()


def _loop(envs, steps, keep_every=None, write=False):
    """A client loop: rebinds its names each step (``write``: after writing into the batch); with
    ``keep_every`` keeps a sub-view now and then."""
    held = []
    obs, infos = envs.reset(seed=0)
    for step in range(steps):
        if envs.batch_size < envs.num_envs:
            envs.send(np.zeros(len(infos["env_id"]), np.int64), infos["env_id"])
            obs, reward, terminated, truncated, infos = envs.recv()
        else:
            obs, reward, terminated, truncated, infos = envs.step(np.zeros(envs.num_envs, np.int64))
        if write:
            obs[:, 0] = 0.0
            reward *= 2.0
        if keep_every and step % keep_every == 0:
            held.append(obs[0])
    return held


@pytest.mark.parametrize("vector_kwargs", [VIEWS, {**VIEWS, "batch_size": 2}], ids=["lockstep", "batches"])
def test_views_are_writable_and_a_loop_that_rebinds_its_names_is_never_reported(vector_kwargs):
    envs = portal_shm.make_vec("CartPole-v1", 4, vector_kwargs=vector_kwargs)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", KeptViewWarning)
            _loop(envs, 40, write=True)
        obs, reward, terminated, truncated, _ = (
            envs.step(np.zeros(4, np.int64)) if envs.batch_size == 4 else envs.recv()
        )
        for array in (obs, reward, terminated, truncated):
            assert array.flags.writeable and not array.flags.owndata
        obs[0] = 128  # as gymnasium's test_no_copy_async_vector_env does
        assert (obs[0] == 128).all()
    finally:
        envs.close()


def test_a_client_writing_into_views_changes_no_later_result():
    """Writes into views land in the slot the servers write again: the next results are the envs'
    own, equal to a copying portal's."""
    views = portal_shm.make_vec("CartPole-v1", 2, vector_kwargs={**VIEWS, "ring_depth": 2})
    copies = portal_shm.make_vec("CartPole-v1", 2)
    try:
        obs, _ = views.reset(seed=1)
        expected, _ = copies.reset(seed=1)
        for step in range(30):
            np.testing.assert_array_equal(obs, expected)
            obs -= 1.0  # a normalisation in place, into the ring slot
            actions = np.array([step % 2, 1 - step % 2])
            obs, reward, terminated, truncated, _ = views.step(actions)
            expected, expected_reward, expected_terminated, expected_truncated, _ = copies.step(actions)
            reward[:] = -1.0
            terminated[:] = truncated[:] = True
    finally:
        views.close()
        copies.close()


@pytest.mark.parametrize("vector_kwargs", [VIEWS, {**VIEWS, "batch_size": 2}], ids=["lockstep", "batches"])
def test_a_view_kept_past_its_slot_is_reported_once_at_the_clients_line(vector_kwargs):
    envs = portal_shm.make_vec("CartPole-v1", 4, vector_kwargs=vector_kwargs)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            _loop(envs, 40, keep_every=3)
        reports = [w for w in caught if issubclass(w.category, KeptViewWarning)]
        assert len(reports) == 1, [str(w.message) for w in caught]
        assert reports[0].filename == __file__
        assert "copy=False" in str(reports[0].message) and "ring_depth - 1 = 3" in str(reports[0].message)
    finally:
        envs.close()
