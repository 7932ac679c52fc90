"""Nothing of a test run stays in /tmp. What Stable-Baselines3, Ray and pytest write there by default
goes into the run's scratch directory (``tests/conftest.py``), which the run removes: no
``/tmp/SB3-*``, ``/tmp/ray/session_*`` or ``/tmp/pytest-of-*``; what the project's benchmarks make
(key directories first) they remove themselves. ``.ci/run`` checks the whole run for any new entry
of /tmp and /dev/shm."""

import glob
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from portal_shm.remote.host.spawn import LocalKeys

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


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


def test_pytests_tmp_path_is_in_the_runs_scratch_directory(tmp_path):
    """(else ``/tmp/pytest-of-<user>`` keeps the last three runs' files, test keys among them)"""
    scratch = Path(os.environ["PYTEST_DEBUG_TEMPROOT"]).resolve()  # (the run's scratch directory)
    assert tmp_path.resolve().is_relative_to(scratch), tmp_path


def test_the_chaos_benchmark_leaves_nothing_in_its_temp_directory():
    """A short chaos run of its remote lane (a host with keys of its own, behind a link) in a
    process whose temp directory is its own: afterwards it is empty again. (It left its key
    directory there, agent and host keys inside; the run directories of its host and portal go too.)"""
    private = tempfile.mkdtemp(prefix="psm-t-", dir="/tmp")  # (short: run directories' sockets live in it)
    try:
        result = subprocess.run(
            [sys.executable, str(ROOT / "benchmarks" / "chaos.py"), "--backends", "remote", "--minutes", "0.02"],
            env={**os.environ, "TMPDIR": private},
            capture_output=True,
            text=True,
            timeout=240,
        )
        assert "remote-cartpole" in result.stdout and "left behind: nothing" in result.stdout, result.stdout[-3000:]
        assert os.listdir(private) == []
    finally:
        shutil.rmtree(private, ignore_errors=True)


def test_temporary_keys_are_removed_at_the_end_of_their_block_failed_or_not():
    with pytest.raises(RuntimeError, match="a failure inside"):
        with LocalKeys.temporary("psm-keys-test-") as keys:
            root = keys.root
            assert glob.glob(os.path.join(root, "agent", "*.key_secret")) == [keys.agent]
            raise RuntimeError("a failure inside")
    assert not os.path.exists(root)
