"""Long-running listeners that agents attach to by address: fresh workers per agent session."""

import os
import subprocess
import sys
import time

import numpy as np
import pytest

import portal_shm

pytestmark = pytest.mark.integration


@pytest.fixture
def listener(tmp_path):
    address = f"ipc://{tmp_path}/listener.sock"
    process = subprocess.Popen(
        [sys.executable, "-m", "portal_shm.server", "--listen", address], stdout=subprocess.PIPE, text=True
    )
    assert "listener at" in process.stdout.readline()
    yield address
    process.terminate()
    process.wait(10)


def test_agents_attach_one_after_another(listener):
    for _ in range(2):
        envs = portal_shm.make_vec("CartPole-v1", 3, backend="attach", address=listener)
        try:
            assert all("of listener" in server["runtime"] for server in envs.servers)
            obs, _ = envs.reset(seed=0)
            _, reward, *_ = envs.step(np.zeros(3, np.int64))
            assert obs.shape == (3, 4) and reward.tolist() == [1.0, 1.0, 1.0]
        finally:
            envs.close()
    assert [name for name in os.listdir(os.path.dirname(listener[len("ipc://") :]))] == ["listener.sock"]


def test_a_listeners_workers_take_a_megabyte_of_env_kwargs(listener):
    """The listener hands each worker the agent's config as a private file in the agent's run
    directory, not in the worker's environment (Linux refuses a variable over 128 KiB)."""
    payload = "0123456789abcdef" * (1 << 16)
    envs = portal_shm.make_vec(
        "portal_shm.server.example_envs:PayloadEnv", 2, backend="attach", address=listener, payload=payload
    )
    try:
        assert envs.get_attr("payload_length") == (len(payload), len(payload))
        run_dir = os.path.join(os.path.dirname(listener[len("ipc://") :]), envs.tag)
        assert [name for name in os.listdir(run_dir) if name.startswith("config-")] == []
    finally:
        envs.close()
    assert not os.path.exists(run_dir)


def test_attached_worker_errors_and_deaths_are_reported(listener):
    with pytest.raises(portal_shm.errors.EnvNotFoundError, match="NoSuchEnv"):
        portal_shm.make_vec("NoSuchEnv-v0", 1, backend="attach", address=listener)
    envs = portal_shm.make_vec(
        "portal_shm.server.example_envs:FaultyEnv", 1, backend="attach", address=listener, fault="exit", after=1
    )
    try:
        envs.reset(seed=0)
        started = time.monotonic()
        with pytest.raises(portal_shm.errors.ServerDiedError, match="exit code 7"):
            envs.step(np.zeros(1, np.int64))
        assert time.monotonic() - started < 10
    finally:
        envs.close()


def test_nobody_listening_is_a_clear_error(tmp_path):
    with pytest.raises(portal_shm.PortalError, match="no env-server listener answers"):
        portal_shm.make_vec("CartPole-v1", 1, backend="attach", address=f"ipc://{tmp_path}/nobody.sock")
    with pytest.raises(portal_shm.PortalError, match="ipc://PATH"):
        portal_shm.make_vec("CartPole-v1", 1, backend="attach", address="tcp://127.0.0.1:5555")
