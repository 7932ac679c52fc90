"""``python -m portal_shm host`` as an operator runs it: the start-up banner on stdout (address, the
public key to copy, the clients directory, what agents may run), and on SIGTERM or Ctrl-C a last
line saying what it freed. On 127.0.0.1 only."""

import signal

import numpy as np
import pytest

import portal_shm
from portal_shm.remote import keys
from portal_shm.remote.host.spawn import LocalKeys
from tests.host_daemon import HostDaemon


@pytest.fixture
def local_keys(tmp_path):
    return LocalKeys(str(tmp_path))


@pytest.fixture
def daemon(local_keys):
    host = HostDaemon(
        "--bind", "tcp://127.0.0.1:0", "--keys", local_keys.host_dir, "--clients", local_keys.clients_dir,
        "--runtimes", "process",
    )  # fmt: skip
    yield host
    host.kill()


def test_banner_on_stdout_and_sigterm_says_what_was_freed(local_keys, daemon):
    text, address = daemon.banner()
    assert " INFO " in text and "WARNING" not in text
    public = keys.public_key(local_keys.host_key, "test").decode()
    assert f"public key  {public}" in text and local_keys.host_key in text
    assert f"clients     {local_keys.clients_dir}: 1 agent key(s) (agent.key)" in text
    assert "agents may run: runtimes process; envs the " in text
    envs = portal_shm.make_vec("CartPole-v1", 2, backend="remote", hosts=[address], **local_keys.options())
    try:
        envs.reset(seed=0)
        envs.step(np.zeros(2, np.int64))
        servers = len(envs.servers)
        daemon.process.send_signal(signal.SIGTERM)
        line = daemon.read_until(r"stopped \(SIGTERM\)", 60)
    finally:
        envs.close()
    assert f"closed 1 agent session(s), stopped {servers} env server(s) with 2 env(s)" in line
    assert daemon.process.wait(30) == 0, "".join(daemon.stderr)


def test_ctrl_c_stops_an_idle_host_with_its_shutdown_line(daemon):
    daemon.banner()
    daemon.process.send_signal(signal.SIGINT)
    line = daemon.read_until(r"stopped \(SIGINT\)", 30)
    assert "closed 0 agent session(s), stopped 0 env server(s) with 0 env(s)" in line
    assert daemon.process.wait(30) == 0, "".join(daemon.stderr)
