"""What Stable-Baselines3 and Ray write to /tmp by default goes into the test run's scratch directory
(``tests/conftest.py``), which the run removes: no ``/tmp/SB3-*`` and no ``/tmp/ray/session_*``
are left behind (``.ci/run`` checks the whole run the same way)."""

import glob
import os

import pytest

pytestmark = pytest.mark.integration


def _new(pattern: str, before: set) -> list:
    return sorted(set(glob.glob(pattern)) - before)


def test_sb3_logs_into_the_runs_scratch_directory():
    pytest.importorskip("stable_baselines3")
    from stable_baselines3 import PPO

    before = set(glob.glob("/tmp/SB3-*"))
    model = PPO("MlpPolicy", "CartPole-v1", n_steps=64, batch_size=64, n_epochs=1, device="cpu")
    model.learn(64)
    assert _new("/tmp/SB3-*", before) == []
    assert model.logger.dir == os.environ["SB3_LOGDIR"] and os.path.isdir(model.logger.dir)


def test_a_local_ray_keeps_its_session_in_the_runs_scratch_directory():
    ray = pytest.importorskip("ray")
    if ray.is_initialized():
        pytest.skip("this process is connected to a Ray cluster already")
    before = set(glob.glob("/tmp/ray/session_*"))
    ray.init(num_cpus=1, _node_ip_address="127.0.0.1", include_dashboard=False, log_to_driver=False)
    try:
        sessions = glob.glob(os.path.join(os.environ["RAY_TMPDIR"], "ray", "session_2*"))
    finally:
        ray.shutdown()
    assert sessions
    assert _new("/tmp/ray/session_*", before) == []
