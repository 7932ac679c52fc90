"""Training presets in real containers, and Stable-Baselines3's CnnPolicy on containerised Atari.

The images are built from this checkout under test tags (the build stage comes from Docker's cache
when ``portal-shm/ale`` was built before), so ``portal_shm.presets`` in them is this code.
"""

import numpy as np
import pytest

import portal_shm
from portal_shm import presets
from testkit.docker_images import docker_or_skip

pytestmark = pytest.mark.docker


@pytest.fixture(scope="module")
def train_images():
    docker_or_skip()
    from portal_shm.runtimes.image_build import build_image

    return {name: build_image(name, f"portal-shm-test/{name}-train") for name in ("ale", "vizdoom")}


def test_atari_preset_in_a_container_equals_the_local_one(train_images):
    pytest.importorskip("ale_py")
    envs = portal_shm.make_vec(
        "portal_shm.presets:atari",
        2,
        backend="docker",
        image=train_images["ale"],
        env_id="ALE/Breakout-v5",
        vector_kwargs={"autoreset_mode": "SameStep"},
    )
    local = [presets.atari("ALE/Breakout-v5") for _ in range(2)]
    try:
        assert envs.single_observation_space.shape == (4, 84, 84)
        obs, _ = envs.reset(seed=3)
        np.testing.assert_array_equal(obs, np.stack([env.reset(seed=3 + i)[0] for i, env in enumerate(local)]))
        for step in range(30):
            actions = np.array([step % 4, (step + 1) % 4])
            obs, *_ = envs.step(actions)
            np.testing.assert_array_equal(obs, np.stack([env.step(int(a))[0] for env, a in zip(local, actions)]))
    finally:
        envs.close()
        for env in local:
            env.close()


def test_vizdoom_preset_in_a_container(train_images):
    envs = portal_shm.make_vec(
        "portal_shm.presets:vizdoom",
        2,
        backend="docker",
        image=train_images["vizdoom"],
        vector_kwargs={"autoreset_mode": "SameStep"},
    )
    try:
        obs, _ = envs.reset(seed=0)
        assert obs.shape == (2, 4, 60, 80) and obs.dtype == np.uint8
        _, rewards, *_ = envs.step(np.zeros(2, np.int64))
        assert rewards.tolist() == [-4.0, -4.0]  # -1 per tic, 4 tics per step
    finally:
        envs.close()


def test_sb3_cnn_policy_trains_on_containerised_atari(train_images):
    pytest.importorskip("stable_baselines3")
    from stable_baselines3 import PPO
    from stable_baselines3.common.vec_env import VecMonitor

    from portal_shm.sb3 import SB3VecEnv

    portal = portal_shm.make_vec(
        "portal_shm.presets:atari",
        2,
        backend="docker",
        image=train_images["ale"],
        env_id="ALE/Pong-v5",
        vector_kwargs={"autoreset_mode": "SameStep"},
    )
    env = VecMonitor(SB3VecEnv(portal))
    try:
        model = PPO("CnnPolicy", env, n_steps=32, batch_size=32, n_epochs=1, seed=0, device="cpu")
        before = [p.detach().clone() for p in model.policy.parameters()]
        model.learn(total_timesteps=64)
        assert model.num_timesteps == 64
        assert any(not (a == b.detach()).all() for a, b in zip(before, model.policy.parameters()))  # it updated
    finally:
        env.close()


def test_ale_vector_hosts_the_games_in_a_container_equal_to_it_in_process(train_images):
    """``presets.atari_vector`` in a container (``--network none``, ALE's threads inside): the
    same observations and infos as ALE's vector env in this process with the same settings."""
    vector_env = pytest.importorskip("ale_py.vector_env")
    envs = portal_shm.make_vec(
        "portal_shm.presets:atari_vector",
        2,
        backend="docker",
        image=train_images["ale"],
        env_kwargs={"env_id": "ALE/Pong-v5", "noop_max": 5, "repeat_action_probability": 0.0},
        vector_kwargs={"envs_per_server": 2},
    )
    local = vector_env.AtariVectorEnv(
        "pong", 2, num_threads=1, noop_max=6, use_fire_reset=False, reward_clipping=False, repeat_action_probability=0.0
    )
    try:
        assert [server["hosting"] for server in envs.servers] == ["ale_py.AtariVectorEnv"]
        obs, _ = envs.reset(seed=[4, 5])
        np.testing.assert_array_equal(obs, local.reset(seed=np.array([4, 5]))[0])
        rng = np.random.default_rng(0)
        for _ in range(40):
            actions = rng.integers(0, 6, 2)
            got, want = envs.step(actions), local.step(actions)
            np.testing.assert_array_equal(got[0], want[0])
            np.testing.assert_array_equal(got[4]["frame_number"], want[4]["frame_number"])
    finally:
        envs.close()
        local.close()
