"""Agent key names: one per machine by default, so agents' public keys sit side by side in a host's
clients directory; a directory where two files hold one key, or two names clash, is refused."""

import getpass
import logging
import os
import shutil
import socket
import subprocess
import sys

import pytest

from portal_shm.errors import PortalError
from portal_shm.remote import keys
from portal_shm.remote.host.daemon import ClientKeys, Host, HostOptions


def _keys_create(directory, user):
    env = {**os.environ, "PORTAL_SHM_KEYS": str(directory), "USER": user, "LOGNAME": user}
    done = subprocess.run(
        [sys.executable, "-m", "portal_shm", "keys", "create"], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_keys_create_names_the_pair_after_user_and_machine(tmp_path):
    out = _keys_create(tmp_path, "alice")
    name = f"alice@{socket.gethostname()}"
    assert sorted(os.listdir(tmp_path)) == [f"{name}.key", f"{name}.key_secret"]
    assert f"{tmp_path}/{name}.key" in out.replace("\n", "")
    assert os.stat(tmp_path / f"{name}.key_secret").st_mode & 0o077 == 0


def test_two_agents_keys_go_side_by_side_into_one_clients_directory(tmp_path):
    clients = tmp_path / "clients"
    clients.mkdir()
    for user in ("alice", "bob"):
        _keys_create(tmp_path / user, user)
        for name in os.listdir(tmp_path / user):
            if name.endswith(".key"):
                shutil.copy(tmp_path / user / name, clients)  # what scp into the host's clients directory does
    assert len(keys.client_keys(str(clients))) == 2


def test_default_name_is_sanitized_for_a_file_name(monkeypatch):
    monkeypatch.setenv("LOGNAME", "../a b/c")
    assert keys.default_key_name() == f"a-b-c@{socket.gethostname()}"
    monkeypatch.delenv("LOGNAME")
    assert keys.default_key_name().startswith(getpass.getuser().lstrip(".-"))


def test_the_agent_uses_this_machines_key_and_falls_back_to_the_old_default(tmp_path, monkeypatch):
    monkeypatch.setenv("PORTAL_SHM_KEYS", str(tmp_path))
    mine = str(tmp_path / (keys.default_key_name() + ".key_secret"))
    assert keys.default_client_key() == mine  # neither exists: the one keys create makes, named in the error
    keys.create_key_pair(str(tmp_path), "agent")
    assert keys.default_client_key() == str(tmp_path / "agent.key_secret")
    keys.create_key_pair(str(tmp_path), keys.default_key_name())
    assert keys.default_client_key() == mine


def _host(tmp_path, clients):
    return Host(HostOptions(bind="tcp://127.0.0.1:0", keys_dir=str(tmp_path / "host"), clients_dir=str(clients)))


def test_a_host_refuses_to_start_with_one_key_in_two_client_files(tmp_path):
    public, _ = keys.create_key_pair(str(tmp_path / "agent"), "agent")
    clients = tmp_path / "clients"
    clients.mkdir()
    shutil.copy(public, clients / "alice@nb.key")
    shutil.copy(public, clients / "bob@ws.key")
    with pytest.raises(PortalError, match=r"alice@nb\.key and bob@ws\.key hold the same public key; remove one"):
        _host(tmp_path, clients)


def test_a_host_refuses_to_start_with_client_names_that_differ_only_in_case(tmp_path):
    clients = tmp_path / "clients"
    keys.create_key_pair(str(clients), "Alice@nb")
    keys.create_key_pair(str(clients), "alice@nb")
    for name in os.listdir(clients):
        if name.endswith("_secret"):
            os.remove(clients / name)
    with pytest.raises(PortalError, match=r"Alice@nb\.key and alice@nb\.key differ only in case"):
        _host(tmp_path, clients)


def test_a_clash_that_appears_while_serving_refuses_those_keys_and_logs_both_files(tmp_path, caplog):
    clients = tmp_path / "clients"
    clients.mkdir()
    alice, _ = keys.create_key_pair(str(tmp_path / "a"), "alice")
    bob, _ = keys.create_key_pair(str(tmp_path / "b"), "bob")
    shutil.copy(alice, clients)
    shutil.copy(bob, clients)
    accepted = ClientKeys(str(clients))
    alice_key = keys.public_key(alice, "test")
    assert accepted.callback("portal-shm", alice_key)
    shutil.copy(alice, clients / "alice-copy.key")
    os.utime(clients, ns=(0, os.stat(clients).st_mtime_ns + 1))  # a change within the clock's tick
    with caplog.at_level(logging.ERROR, logger="portal_shm.host"):
        assert not accepted.callback("portal-shm", alice_key)
    assert accepted.callback("portal-shm", keys.public_key(bob, "test"))
    assert "alice-copy.key and alice.key hold the same public key" in caplog.text
