"""The default copy reuses an output array only once the caller dropped it and all it derived."""

import gc

import numpy as np
import pytest

import portal_shm
from portal_shm.agent.local.reused_copies import ReusedCopies

pytestmark = pytest.mark.fast


def address(array: np.ndarray) -> int:
    return array.__array_interface__["data"][0]


def test_a_dropped_array_takes_the_next_copy_and_a_held_one_never_changes():
    pool = ReusedCopies()
    first = pool.copy("obs", np.full((4, 84, 84), 1, np.uint8))
    where = address(first)
    second = pool.copy("obs", np.full((4, 84, 84), 2, np.uint8))
    assert address(second) != where and (first == 1).all()  # held: a new array
    del first
    third = pool.copy("obs", np.full((4, 84, 84), 3, np.uint8))
    assert address(third) == where and (third == 3).all() and (second == 2).all()


@pytest.mark.parametrize(
    "derive",
    [
        lambda a: a[1:],  # a slice holds its base
        lambda a: a.reshape(-1),
        lambda a: [a],
        lambda a: memoryview(a),
        lambda a: {"obs": a},
    ],
    ids=["slice", "reshape", "list", "memoryview", "dict"],
)
def test_what_the_caller_derived_keeps_the_array_its_own(derive):
    pool = ReusedCopies()
    kept = derive(pool.copy("obs", np.arange(12.0).reshape(3, 4)))
    gc.collect()
    for value in range(5):
        pool.copy("obs", np.full((3, 4), -1.0 - value))
    view = kept["obs"] if isinstance(kept, dict) else kept[0] if isinstance(kept, list) else kept
    assert np.asarray(view).min() >= 0  # never written again


def test_a_tensor_over_the_array_keeps_it():
    torch = pytest.importorskip("torch")
    pool = ReusedCopies()
    tensor = torch.from_numpy(pool.copy("obs", np.zeros(8, np.float32)))
    for _ in range(5):
        pool.copy("obs", np.ones(8, np.float32))
    assert float(tensor.sum()) == 0.0


def test_trees_keep_their_nesting_and_another_shape_gets_its_own_array():
    pool = ReusedCopies()
    tree = {"image": np.zeros((2, 3), np.uint8), "pos": (np.ones(2), np.arange(2))}
    out = pool.tree(tree)
    assert set(out) == {"image", "pos"} and isinstance(out["pos"], tuple)
    assert all(a is not b for a, b in [(out["image"], tree["image"]), (out["pos"][0], tree["pos"][0])])
    del out
    bigger = pool.tree({"image": np.zeros((3, 3), np.uint8), "pos": (np.ones(2), np.arange(2))})
    assert bigger["image"].shape == (3, 3)


def test_a_portal_reuses_dropped_batches_and_never_changes_kept_ones():
    envs = portal_shm.make_vec("CartPole-v1", 2, vector_kwargs={"envs_per_server": 2})
    try:
        kept, _ = envs.reset(seed=0)
        snapshot = kept.copy()
        seen = set()
        for _ in range(20):
            obs, *_ = envs.step(envs.action_space.sample())
            seen.add(address(obs))
            del obs
        assert (kept == snapshot).all()  # the caller's, unchanged
        # dropped batches came back (lockstep: the ring slots' private mappings): no fresh array each step
        assert len(seen) <= envs.ring_depth
    finally:
        envs.close()
