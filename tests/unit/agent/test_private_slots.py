"""``copy=True`` over private mappings of the ring slots: what the caller holds never changes, what
the caller writes reaches nothing (not the next steps, not a masked reset's kept rows), and a
dropped batch's slot comes back without a copy."""

from __future__ import annotations

import gc

import gymnasium as gym
import numpy as np
import pytest

import portal_shm
from portal_shm.agent.local.private_slots import PrivateSlots

pytestmark = pytest.mark.fast

WALK = "portal_shm.server.example_envs:RandomWalkEnv"


def address(array: np.ndarray) -> int:
    return array.__array_interface__["data"][0]


def _pair(n: int, **vector):
    """A portal and gymnasium's SyncVectorEnv of the same envs (the truth to compare with)."""
    envs = portal_shm.make_vec(WALK, n, vector_kwargs={"envs_per_server": 1, **vector})
    sync = gym.vector.SyncVectorEnv(
        [lambda: gym.wrappers.PassiveEnvChecker(portal_shm.server.envs.make_env(WALK, {}))] * n,
        autoreset_mode=vector.get("autoreset_mode", gym.vector.AutoresetMode.NEXT_STEP),
    )
    return envs, sync


@pytest.mark.parametrize("hold", [0, 1, 3, 10], ids=lambda h: f"holds-{h}")
def test_writes_never_leak_and_held_batches_never_change(hold):
    envs, sync = _pair(3)
    try:
        assert envs._ring.private is not None  # (this machine maps them: Linux, /proc/self/pagemap)
        held, snapshots = [], []
        obs, _ = envs.reset(seed=1)
        expected, _ = sync.reset(seed=1)
        for step in range(6 * envs.ring_depth):
            np.testing.assert_array_equal(obs, expected)
            obs[:] = -1000.0  # the caller writes into its batch...
            if len(held) < hold:  # ... and keeps some, written
                held.append(obs)
                snapshots.append(obs.copy())
            actions = np.array([step % 2, 1, 0])
            obs, _, _, _, _ = envs.step(actions)
            expected, _, _, _, _ = sync.step(actions)
        for array, snapshot in zip(held, snapshots):
            np.testing.assert_array_equal(array, snapshot)
    finally:
        envs.close()
        sync.close()


def test_a_masked_reset_keeps_the_rows_the_envs_wrote_not_the_callers():
    envs, sync = _pair(3, autoreset_mode="Disabled")
    try:
        obs, _ = envs.reset(seed=4)
        expected, _ = sync.reset(seed=4)
        for _ in range(3):
            obs, *_ = envs.step(np.ones(3, np.int64))
            expected, *_ = sync.step(np.ones(3, np.int64))
        obs[:] = 7.0
        mask = np.array([True, False, False])
        obs, _ = envs.reset(seed=[9, None, None], options={"reset_mask": mask})
        expected, _ = sync.reset(seed=[9, None, None], options={"reset_mask": mask})
        np.testing.assert_array_equal(obs, expected)
    finally:
        envs.close()
        sync.close()


def test_dropped_batches_come_back_from_the_slots_without_a_copy():
    envs = portal_shm.make_vec("portal_shm.server.example_envs:NullEnv", 4, shape=(32, 32, 3))
    try:
        envs.reset(seed=0)
        seen = set()
        for _ in range(20):
            obs, *_ = envs.step(np.zeros(4, np.int64))
            seen.add(address(obs))
            assert not obs.flags.owndata  # a slot's private mapping, not a copy
            del obs
        assert len(seen) <= envs.ring_depth
    finally:
        envs.close()


def test_a_caller_holding_every_slot_gets_copies_and_the_portal_steps_on():
    envs = portal_shm.make_vec("portal_shm.server.example_envs:NullEnv", 2, shape=(8,))
    try:
        obs, _ = envs.reset(seed=0)
        kept = [obs]
        for _ in range(3 * envs.ring_depth):
            before = envs._lockstep.slot
            obs, *_ = envs.step(np.zeros(2, np.int64))
            kept.append(obs)
            # never the slot of the batch before: a restart reads its last observation there
            assert envs._lockstep.slot != before
            assert envs._ring.previous[envs._lockstep.slot] == before
        private = envs._ring.private
        assert sum(private.held(k) for k in range(envs.ring_depth)) == envs.ring_depth - 2
        assert sum(array.flags.owndata for array in kept) >= 2 * envs.ring_depth  # the copies
        del kept, obs
        gc.collect()
        obs, *_ = envs.step(np.zeros(2, np.int64))
        assert not obs.flags.owndata  # the slots are free again
    finally:
        envs.close()


def test_views_batches_and_variable_observations_do_not_use_private_slots():
    for vector in ({"copy": False}, {"batch_size": 2}):
        envs = portal_shm.make_vec("CartPole-v1", 4, vector_kwargs=vector)
        try:
            assert envs._ring.private is None
        finally:
            envs.close()
    envs = portal_shm.make_vec("portal_shm.server.example_envs:TextObsEnv", 2)
    try:
        assert envs._ring.private is None
    finally:
        envs.close()


def test_no_ring_segment_no_private_slots():
    assert PrivateSlots.of(None, {0: {"offset": 0, "shape": [4, 2], "dtype": "float32"}}, 4, lambda leaf: None) is None


def test_a_prepared_slot_shows_the_ring_again_and_is_handed_out_without_a_second_scan():
    import mmap
    import os

    depth, shape = 4, (4, 3, 4096)
    fd = os.memfd_create("private-slots-test")
    try:
        os.ftruncate(fd, int(np.prod(shape)))
        ring = mmap.mmap(fd, int(np.prod(shape)))
        slots = PrivateSlots.of(
            fd, {0: {"offset": 0, "shape": list(shape), "dtype": "uint8"}}, depth, lambda leaf: leaf(0)
        )
        assert slots is not None
        batch = slots.hand_out(1)
        batch[1, 7] = 9  # the caller writes a page of its own...
        assert ring[4096 * 3 + 4096 + 7] == 0  # ... which never reaches the ring
        del batch
        scans = []
        leaf = slots.leaves[1][0]
        original = leaf.written
        leaf.written = lambda: scans.append(1) or original()
        ring[4096 * 3 + 4096 + 7] = 5  # a server writes the slot
        slots.prepare(1)  # (the driver, while the servers step)
        again = slots.hand_out(1)
        assert again[1, 7] == 5 and not again[0].any() and len(scans) == 1
        ring.close()
    finally:
        os.close(fd)
