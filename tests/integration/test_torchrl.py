"""TorchRL over ``make_vec``: what ``GymWrapper`` and a collector store equals what they store over
gymnasium's ``SyncVectorEnv``, with the same seeds and the same deterministic policy.

TorchRL turns each observation into a tensor without a copy and keeps it until the rollout (or the
collector's batch) ends, so the arrays a portal returns must not change under it afterwards; these
tests keep 300 steps of 4 envs and compare every stored field (ring views kept that long, with
``copy=False``, differ in about 1,180 of the 1,200 next observations). ``GymWrapper`` takes the
``SameStep`` and ``Disabled`` autoreset modes (``Disabled`` is the one TorchRL prefers: it resets
the envs that ended with ``reset(options={"reset_mask": ...})``) and refuses ``NextStep``,
gymnasium's and ``make_vec``'s default.
"""

from __future__ import annotations

import gymnasium as gym
import pytest
import torch

import portal_shm

torchrl = pytest.importorskip("torchrl", reason="torchrl is not installed (pip install 'portal-shm[torchrl]')")
from tensordict.nn import TensorDictModule  # noqa: E402  (torchrl brings tensordict)
from torchrl.collectors import Collector  # noqa: E402
from torchrl.envs import GymWrapper  # noqa: E402
from torchrl.envs.utils import check_env_specs  # noqa: E402

pytestmark = pytest.mark.integration

ENV_ID, NUM_ENVS, STEPS = "CartPole-v1", 4, 300
MODES = ["SameStep", "Disabled"]
FIELDS = [("next", "observation"), ("next", "reward"), ("next", "done"), "observation", "action"]


def _portal(mode: str) -> gym.vector.VectorEnv:
    return portal_shm.make_vec(ENV_ID, NUM_ENVS, vector_kwargs={"autoreset_mode": mode})


def _reference(mode: str) -> gym.vector.VectorEnv:
    make = [lambda: gym.make(ENV_ID)] * NUM_ENVS
    return gym.vector.SyncVectorEnv(make, autoreset_mode=gym.vector.AutoresetMode(mode))


def _falling_policy() -> TensorDictModule:
    """Pushes the cart the way the pole leans away from: deterministic, and an episode ends about
    every 9 steps, so a rollout crosses many autoresets."""
    return TensorDictModule(lambda obs: (obs[..., 2] < 0).long(), in_keys=["observation"], out_keys=["action"])


def _wrap(venv: gym.vector.VectorEnv) -> GymWrapper:
    env = GymWrapper(venv, categorical_action_encoding=True)
    env.set_seed(0)
    return env


def _rollout(venv: gym.vector.VectorEnv):
    env = _wrap(venv)
    try:
        return env.rollout(STEPS, _falling_policy(), break_when_any_done=False)
    finally:
        env.close()


def _batches(venv: gym.vector.VectorEnv, count: int) -> list:
    """``count`` batches of 50 steps of every env, kept in a list as a training loop keeps them."""
    env = _wrap(venv)
    frames = NUM_ENVS * 50
    collector = Collector(
        env,
        _falling_policy(),
        frames_per_batch=frames,
        total_frames=frames * count,
        auto_register_policy_transforms=False,
    )
    try:
        return list(collector)
    finally:
        collector.shutdown()
        env.close()


def _assert_same(got, expected, what: str) -> None:
    """Every field equal, or which fields differ in how many of the env-steps."""
    assert got.batch_size == expected.batch_size, what
    differing = {}
    for key in FIELDS:
        rows = (got[key] != expected[key]).reshape(*got.batch_size, -1).any(-1)
        if rows.any():
            differing["/".join(key) if isinstance(key, tuple) else key] = int(rows.sum())
    assert not differing, f"{what}: fields that differ from SyncVectorEnv's (env-steps of {got.numel()}): {differing}"


@pytest.mark.parametrize("mode", MODES)
def test_gym_wrapper_rollout_over_make_vec_equals_the_rollout_over_sync_vector_env(mode):
    expected = _rollout(_reference(mode))
    got = _rollout(_portal(mode))
    assert int(expected["next", "done"].sum()) > 50  # the rollout crosses many autoresets
    _assert_same(got, expected, f"rollout({STEPS}) of GymWrapper(make_vec({ENV_ID!r}, {NUM_ENVS}, {mode}))")


@pytest.mark.parametrize("mode", MODES)
def test_collector_batches_kept_over_make_vec_equal_those_over_sync_vector_env(mode):
    expected = _batches(_reference(mode), 4)
    got = _batches(_portal(mode), 4)
    assert len(got) == len(expected) == 4
    for index, (batch, reference) in enumerate(zip(got, expected)):
        _assert_same(batch, reference, f"Collector batch {index} of 4 over make_vec ({mode})")


@pytest.mark.parametrize("mode", MODES)
def test_check_env_specs_passes_over_make_vec(mode):
    env = _wrap(_portal(mode))
    try:
        assert env.batch_size == torch.Size([NUM_ENVS])
        check_env_specs(env)
    finally:
        env.close()


def test_gym_wrapper_refuses_make_vecs_default_next_step_mode():
    """What README tells TorchRL users: pass ``autoreset_mode`` SameStep or Disabled."""
    venv = portal_shm.make_vec(ENV_ID, 2)
    try:
        with pytest.raises(RuntimeError, match="SAME_STEP or DISABLED"):
            GymWrapper(venv)
    finally:
        venv.close()
