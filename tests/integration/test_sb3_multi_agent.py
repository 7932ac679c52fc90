"""SB3 PPO trains on PettingZoo agents through the flattened view (parameter sharing), SuperSuit's
use case: ``pettingzoo_env_to_vec_env_v1`` + ``concat_vec_envs_v1`` -> SB3, here
``portal_shm.sb3.flat_agents_vec_env`` with the envs in their own processes. ~12 s on 2 cores."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("stable_baselines3")

from stable_baselines3 import PPO  # noqa: E402
from stable_baselines3.common.vec_env import VecMonitor  # noqa: E402

from portal_shm.sb3 import flat_agents_vec_env  # noqa: E402

pytestmark = pytest.mark.integration


@pytest.mark.training
def test_ppo_trains_20k_steps_on_mpe_agents_with_one_shared_policy():
    torch.set_num_threads(1)
    cycles, num_envs, agents = 25, 4, 3
    vec = VecMonitor(
        flat_agents_vec_env("mpe2.simple_spread_v3:parallel_env", num_envs, env_kwargs={"max_cycles": cycles})
    )
    try:
        assert vec.num_envs == num_envs * agents
        model = PPO("MlpPolicy", vec, n_steps=128, batch_size=256, n_epochs=2, seed=0, device="cpu")
        before = [p.detach().clone() for p in model.policy.parameters()]
        model.learn(total_timesteps=20_000)
        assert model.num_timesteps >= 20_000
        # every agent's row is an episode of its own: all 25 steps long, as many as the steps allow
        steps_per_row = model.num_timesteps // vec.num_envs
        assert vec.episode_count == vec.num_envs * (steps_per_row // cycles)
        assert {info["l"] for info in model.ep_info_buffer} == {cycles}
        assert all(np.isfinite(info["r"]) and info["r"] < 0 for info in model.ep_info_buffer)  # MPE's distances
        assert any(not torch.equal(a, b) for a, b in zip(before, model.policy.parameters()))
    finally:
        vec.close()
