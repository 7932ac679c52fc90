"""``python -m portal_shm host`` as an operator runs it: the start-up banner on stdout (address, the
public key to copy, the clients directory, what agents may run), and on SIGTERM or Ctrl-C a last
line saying what it freed. On 127.0.0.1 only."""

import signal

import numpy as np
import pytest

import portal_shm
from portal_shm.remote import keys
from portal_shm.remote.host.spawn import LocalKeys
from testkit.host_daemon import HostDaemon

pytestmark = pytest.mark.integration


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


def test_limits_are_printed_at_start_and_their_usage_is_in_stats_and_top(local_keys):
    import json
    import subprocess
    import sys

    daemon = HostDaemon(
        "--bind", "tcp://127.0.0.1:0", "--keys", local_keys.host_dir, "--clients", local_keys.clients_dir,
        "--runtimes", "process", "--max-sessions", "7", "--max-sessions-per-agent", "3", "--max-fds", "900",
        "--max-unacked-bytes", "5m", "--max-message-bytes", "2m", "--max-decoded-bytes", "3m",
    )  # fmt: skip
    try:
        text, address = daemon.banner()
        assert "limits      7 sessions (3 per agent key), 1024 envs (512 per agent key), 900 descriptors" in text
        assert "5 MiB of unacknowledged replies per session, messages of 2 MiB decoding to 3 MiB at most" in text
        envs = portal_shm.make_vec("CartPole-v1", 2, backend="remote", hosts=[address], **local_keys.options())
        try:
            envs.reset(seed=0)
            envs.step(np.zeros(2, np.int64))
            quota = envs.stats()["hosts"][0]["quota"]
            assert quota["sessions"] == [1, 7] and quota["agent_sessions"] == [1, 3], quota
            assert quota["envs"] == [2, 1024] and quota["agent_envs"] == [2, 512], quota
            assert quota["unacked_bytes"][1] == 5 << 20 and 0 < quota["fds"][0] < 900, quota
            top = subprocess.run(
                [sys.executable, "-m", "portal_shm", "top", "--once", "--json"],
                capture_output=True,
                text=True,
                timeout=60,
            )
            hosts = [
                p for p in json.loads(top.stdout)["portals"] if p.get("kind") == "host" and p["address"] == address
            ]
            assert hosts and hosts[0]["state"] == "live", top.stdout
            report = hosts[0]["stats"]
            assert report["quota"]["sessions"] == [1, 7] and report["keys"]["agent.key"]["envs"] == 2, report
            shown = subprocess.run(
                [sys.executable, "-m", "portal_shm", "top", "--once"], capture_output=True, text=True, timeout=60
            ).stdout
            assert "env host" in shown and "--max-unacked-bytes" in shown and "agent.key" in shown, shown
        finally:
            envs.close()
    finally:
        daemon.kill()
