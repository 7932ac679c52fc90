"""`portal-shm run`, the main job: lockstep and async batches, through the real CLI entry point, with
the bottleneck verdict and the bench command to compare with at its end."""

import subprocess
import sys

import pytest

from portal_shm.cli.bottleneck import BOUND_BY


@pytest.mark.parametrize("extra", [[], ["--batch-size", "2"]], ids=["lockstep", "batches"])
def test_run_steps_envs_and_reports_throughput_its_bottleneck_and_how_to_compare(extra):
    result = subprocess.run(
        [sys.executable, "-m", "portal_shm", "run", "CartPole-v1", "-n", "4", "--seconds", "1", *extra],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    row = [line for line in result.stdout.splitlines() if line.strip().startswith("│")][-1]
    envs, servers, batched, rate, episodes, mean_return = [cell.strip() for cell in row.strip("│ ").split("│")]
    assert envs == "4" and int(batched.replace(",", "")) > 0 and int(rate.replace(",", "")) > 0
    assert int(episodes) > 0 and 8 < float(mean_return) < 60  # random CartPole: ~22 steps an episode
    lines = result.stdout.splitlines()
    (bound,) = [line for line in lines if line.startswith("bound by: ")]
    assert any(bound.startswith(f"bound by: {label}: ") for label in BOUND_BY.values()), bound  # a second: a verdict
    (step,) = [line for line in lines if line.startswith("next step: ")]
    assert lines.index(step) == lines.index(bound) + 1 and len(step) > len("next step: ") + 20
    assert lines[-1] == "compare: portal-shm bench CartPole-v1 -n 4 --against async" + " ".join([""] + extra)


def test_run_refuses_a_batch_size_that_does_not_fit_the_servers():
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "portal_shm",
            "run",
            "CartPole-v1",
            "-n",
            "4",
            "--seconds",
            "1",
            "--batch-size",
            "3",
            "--envs-per-server",
            "2",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 1 and "multiple of the envs per server" in result.stderr
    assert "Traceback" not in result.stderr
