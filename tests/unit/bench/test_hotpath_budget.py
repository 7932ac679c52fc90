"""benchmarks/hotpath_budget.py drives a real EnvServer without an agent: keep it working."""

import importlib.util
from pathlib import Path

import gymnasium as gym

from portal_shm.bench.ceiling import sample_actions

SCRIPT = Path(__file__).resolve().parents[3] / "benchmarks" / "hotpath_budget.py"


def load_budget():
    spec = importlib.util.spec_from_file_location("hotpath_budget", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_served_loop_steps_like_a_plain_loop():
    budget = load_budget()
    served_envs = [gym.make("CartPole-v1") for _ in range(3)]
    for j, env in enumerate(served_envs):
        env.reset(seed=j)
    actions = sample_actions(served_envs[0].action_space, 0)
    run, close = budget._served_loop(served_envs, actions)
    try:
        steps = run(0.2)
        assert steps > 0 and steps % 3 == 0
        # episodes ended meanwhile, and the server reset them rather than stepping past their end
        # (0: the run stopped on an env's terminating step, whose reset is the next step's)
        assert all(env.unwrapped.steps_beyond_terminated in (None, 0) for env in served_envs)
    finally:
        close()
    raw_envs = [gym.make("CartPole-v1") for _ in range(3)]
    run, close = budget._raw_loop(raw_envs, actions)
    for j, env in enumerate(raw_envs):
        env.reset(seed=j)
    assert run(0.05) % 3 == 0
    close()
