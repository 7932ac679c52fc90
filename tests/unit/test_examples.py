"""The training examples run end to end (a few steps, local processes): they must not rot."""

import os
import pathlib
import subprocess
import sys

import pytest

pytestmark = pytest.mark.integration  # the examples run end to end

ROOT = pathlib.Path(__file__).parents[2]
TINY = [
    "--backend",
    "process",
    "--num-envs",
    "2",
    "--rollout-steps",
    "16",
    "--total-timesteps",
    "64",
    "--minibatches",
    "2",
    "--epochs",
    "1",
    "--tensorboard",
    "",
]


@pytest.mark.training
@pytest.mark.parametrize("script, plugin", [("ppo_atari.py", "ale_py"), ("ppo_vizdoom.py", "vizdoom")])
def test_example_trains_and_writes_its_curve(script, plugin, tmp_path):
    pytest.importorskip("torch")
    pytest.importorskip(plugin)
    prefix = tmp_path / "curve"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    extra = ["--env-id", "ALE/Pong-v5"] if script == "ppo_atari.py" else []
    result = subprocess.run(
        [sys.executable, str(ROOT / "examples" / script), *TINY, *extra, "--save-curve", str(prefix)],
        capture_output=True,
        text=True,
        timeout=240,
        env=env,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "update 2/2" in result.stdout and "SPS" in result.stdout
    assert "done: 64 env steps" in result.stdout
    header = (tmp_path / "curve.csv").read_text().splitlines()[0]
    assert header == "global_step,seconds,episodic_return,episodic_length"


@pytest.mark.training
def test_envpool_script_logs_the_games_returns(tmp_path):
    """examples/ppo_atari_envpool.py, envpool's API through portal_shm.envpool: a few thousand steps
    of Breakout with episodic life, and the games' scores (not one life's) are logged."""
    pytest.importorskip("torch")
    pytest.importorskip("ale_py")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    args = ["--num-envs", "2", "--rollout-steps", "128", "--total-timesteps", "2048", "--epochs", "1"]
    result = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "ppo_atari_envpool.py"), *args, "--tensorboard", ""],
        capture_output=True,
        text=True,
        timeout=240,
        env=env,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    returns = [
        float(line.split("episodic_return=")[1]) for line in result.stdout.splitlines() if "episodic_return=" in line
    ]
    assert len(returns) >= 2 and all(r >= 0 for r in returns), result.stdout
    assert "update 8/8 global_step=2048 SPS=" in result.stdout and "done: 2048 env steps" in result.stdout


@pytest.mark.training
@pytest.mark.parametrize(
    "env, extra",
    [
        ("mpe2.simple_adversary_v3:parallel_env", []),  # two groups, two shared policies
        ("classic/tictactoe-v3", ["--api", "aec", "--env-kwargs", "{}"]),  # turns and action masks
    ],
)
def test_multi_agent_example_trains_every_group(env, extra, tmp_path):
    """examples/ppo_multi_agent.py: parameter-shared PPO over make_vec_ma, a few updates."""
    pytest.importorskip("torch")
    pytest.importorskip("pettingzoo")
    script = ROOT / "examples" / "ppo_multi_agent.py"
    args = ["--env", env, *extra, "--num-envs", "2", "--rollout-steps", "16", "--total-timesteps", "64"]
    result = subprocess.run(
        [sys.executable, str(script), *args, "--epochs", "1", "--minibatches", "2"],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    groups = ["adversary", "agent"] if "adversary" in env else ["player"]
    assert [line.split("'")[1] for line in result.stdout.splitlines() if line.startswith("group ")] == groups
    assert "update 2/2  step 64" in result.stdout and "done: 64 env steps" in result.stdout


@pytest.mark.training
def test_numpy_reinforce_script_trains_and_logs_returns(tmp_path):
    """examples/reinforce_cartpole.py: the framework-free training script portal-shm agent runs."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    args = ["--num-envs", "2", "--updates", "10", "--steps-per-update", "64"]
    result = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "reinforce_cartpole.py"), *args],
        capture_output=True,
        text=True,
        timeout=240,
        env=env,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "update 10/10 episodes=" in result.stdout and "done: 1280 env steps" in result.stdout
