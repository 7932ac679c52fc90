"""skrl over ``make_vec``: ``wrap_env`` recognises a portal as gymnasium's vector env on its own, and
skrl's PPO, with skrl's defaults, trains on it exactly as on gymnasium's ``SyncVectorEnv``.

``wrap_env(env)`` (its default, ``wrapper="auto"``) picks a wrapper by the modules of the classes
among ``type(env).__bases__`` (and ``env.unwrapped``'s), not by ``isinstance``: a portal lists
``gymnasium.vector.VectorEnv`` there. The training runs twice from the same seeds, once per env,
and every loss and reward skrl tracks must be equal: the portal's envs step to the same results,
so the policy, its samples and its updates are the same.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import portal_shm

skrl = pytest.importorskip("skrl", reason="skrl is not installed (pip install skrl)")
import torch  # noqa: E402  (skrl's torch side needs it)
from skrl.agents.torch.ppo import PPO  # noqa: E402
from skrl.envs.wrappers.torch import wrap_env  # noqa: E402
from skrl.envs.wrappers.torch.gymnasium_envs import GymnasiumWrapper  # noqa: E402
from skrl.memories.torch import RandomMemory  # noqa: E402
from skrl.models.torch import CategoricalMixin, DeterministicMixin, Model  # noqa: E402
from skrl.trainers.torch import SequentialTrainer  # noqa: E402
from skrl.utils import set_seed  # noqa: E402

pytestmark = pytest.mark.training

ENV_ID, NUM_ENVS, TIMESTEPS, SEED = "CartPole-v1", 4, 256, 7


class Policy(CategoricalMixin, Model):
    def __init__(self, observation_space, action_space, device):
        Model.__init__(self, observation_space=observation_space, action_space=action_space, device=device)
        CategoricalMixin.__init__(self)
        self.net = torch.nn.Sequential(
            torch.nn.Linear(self.num_observations, 32), torch.nn.Tanh(), torch.nn.Linear(32, self.num_actions)
        )

    def compute(self, inputs, role=""):
        return self.net(inputs["observations"]), {}


class Value(DeterministicMixin, Model):
    def __init__(self, observation_space, action_space, device):
        Model.__init__(self, observation_space=observation_space, action_space=action_space, device=device)
        DeterministicMixin.__init__(self)
        self.net = torch.nn.Sequential(
            torch.nn.Linear(self.num_observations, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1)
        )

    def compute(self, inputs, role=""):
        return self.net(inputs["observations"]), {}


def _train(envs: gym.vector.VectorEnv, directory: str) -> dict[str, list[float]]:
    """skrl's PPO (its default configuration; only logging and checkpoints off) on ``envs`` for
    ``TIMESTEPS`` steps; every value it tracked (losses, learning rate...) and every transition."""
    set_seed(SEED)
    env = wrap_env(envs, verbose=False)
    assert isinstance(env, GymnasiumWrapper) and env.num_envs == NUM_ENVS
    device = torch.device("cpu")
    models = {
        "policy": Policy(env.observation_space, env.action_space, device),
        "value": Value(env.observation_space, env.action_space, device),
    }
    agent = PPO(
        models=models,
        memory=RandomMemory(memory_size=16, num_envs=env.num_envs, device=device),  # PPO's default rollouts
        observation_space=env.observation_space,
        action_space=env.action_space,
        device=device,
        cfg={"experiment": {"directory": directory, "write_interval": 0, "checkpoint_interval": 0}},
    )
    tracked: dict[str, list[float]] = {}
    track = agent.track_data

    def keep(tag: str, value: float) -> None:
        if "time (ms)" not in tag:  # (skrl's timings of its own steps, which differ run to run)
            tracked.setdefault(tag, []).append(float(value))
        track(tag, value)

    record = agent.record_transition

    def transition(**fields: object) -> None:  # every step's transition, as the agent stores it
        for name in ("observations", "actions", "rewards", "next_observations", "terminated", "truncated"):
            tracked.setdefault(f"transition / {name}", []).extend(fields[name].flatten().tolist())  # type: ignore[attr-defined]
        record(**fields)

    agent.track_data, agent.record_transition = keep, transition
    cfg = {"timesteps": TIMESTEPS, "headless": True, "disable_progressbar": True, "close_environment_at_exit": False}
    SequentialTrainer(env=env, agents=agent, cfg=cfg).train()
    return tracked


def test_wrap_env_picks_the_gymnasium_vector_wrapper_and_steps():
    envs = portal_shm.make_vec(ENV_ID, NUM_ENVS)
    try:
        env = wrap_env(envs, verbose=False)  # wrapper="auto"
        assert isinstance(env, GymnasiumWrapper) and env._vectorized
        assert env.num_envs == NUM_ENVS and env.observation_space == envs.single_observation_space
        observations, _ = env.reset()
        assert observations.shape == (NUM_ENVS, 4)
        observations, rewards, terminated, truncated, _ = env.step(torch.zeros((NUM_ENVS, 1), dtype=torch.int64))
        assert observations.shape == (NUM_ENVS, 4) and rewards.tolist() == [[1.0]] * NUM_ENVS
        assert terminated.shape == truncated.shape == (NUM_ENVS, 1)
    finally:
        envs.close()


@pytest.fixture
def one_thread():
    """torch on one thread: these nets are tiny, and a busy machine's cores are better left to the envs."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_skrl_ppo_trains_on_a_portal_exactly_as_on_sync_vector_env(tmp_path, one_thread):
    reference = gym.vector.SyncVectorEnv([lambda: gym.make(ENV_ID)] * NUM_ENVS)
    try:
        expected = _train(reference, str(tmp_path / "sync"))
    finally:
        reference.close()
    envs = portal_shm.make_vec(ENV_ID, NUM_ENVS)
    try:
        got = _train(envs, str(tmp_path / "portal"))
    finally:
        envs.close()
    assert "Loss / Policy loss" in expected and "Loss / Value loss" in expected
    assert len(expected["Loss / Policy loss"]) == TIMESTEPS // 16  # an update per 16 rollout steps
    assert len(expected["transition / rewards"]) == TIMESTEPS * NUM_ENVS
    assert any(expected["transition / terminated"])  # episodes ended and were reset on the way
    assert set(got) == set(expected)
    for tag in expected:
        np.testing.assert_array_equal(got[tag], expected[tag], err_msg=tag)
