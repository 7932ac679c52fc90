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


# -- StrictModes: a clients directory or key file others could write is not trusted -------------

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user takes root")
NOBODY = 65534


def _clients_with(tmp_path, *names):
    """A clients directory (0700) holding a public key file per name; (directory, {name: key})."""
    clients = tmp_path / "clients"
    clients.mkdir(mode=0o700)
    public = {}
    for name in names:
        path, _ = keys.create_key_pair(str(tmp_path / "agents"), name)
        shutil.copy(path, clients)
        public[name] = keys.public_key(path, "test")
    return clients, public


@pytest.mark.parametrize(("mode", "who"), [(0o777, "group and others"), (0o770, "its group"), (0o1703, "others")])
def test_a_host_refuses_to_start_with_a_clients_directory_others_can_write(tmp_path, mode, who):
    clients, _ = _clients_with(tmp_path, "alice")
    os.chmod(clients, mode)
    expected = rf"clients directory {clients} is writable by {who} \(mode {mode:o}\).*chmod go-w {clients}"
    with pytest.raises(PortalError, match=expected):
        _host(tmp_path, clients)


@needs_root
def test_a_host_refuses_to_start_with_a_clients_directory_another_user_owns(tmp_path):
    clients, _ = _clients_with(tmp_path, "alice")
    os.chown(clients, NOBODY, NOBODY)
    with pytest.raises(PortalError, match=rf"{clients} is owned by uid {NOBODY}, neither this user"):
        _host(tmp_path, clients)


def test_a_host_refuses_a_key_directory_others_can_write(tmp_path):
    host_dir = tmp_path / "host"
    host_dir.mkdir()
    os.chmod(host_dir, 0o777)
    with pytest.raises(PortalError, match=rf"key directory {host_dir} is writable by group and others"):
        keys.ensure_host_keys(str(host_dir))
    assert not os.listdir(host_dir)  # refused before any key was made there


def test_key_files_others_can_write_or_own_and_files_that_are_not_regular_are_skipped_and_named(tmp_path, caplog):
    clients, public = _clients_with(tmp_path, "good", "writable", "foreign")
    os.chmod(clients / "writable.key", 0o666)
    foreign = os.geteuid() == 0
    if foreign:
        os.chown(clients / "foreign.key", NOBODY, NOBODY)
    elsewhere, _ = keys.create_key_pair(str(tmp_path / "elsewhere"), "linked")
    os.symlink(elsewhere, clients / "linked.key")
    os.mkfifo(clients / "fifo.key")  # (opened for reading, it would block the host's ZAP thread)
    (clients / "folder.key").mkdir()
    with caplog.at_level(logging.WARNING, logger="portal_shm.host"):
        accepted = ClientKeys(str(clients))
        assert accepted.callback("portal-shm", public["good"])
        assert not accepted.callback("portal-shm", public["writable"])
        assert not accepted.callback("portal-shm", keys.public_key(elsewhere, "test"))
        assert accepted.callback("portal-shm", public["foreign"]) is not foreign
    skipped = [r.getMessage() for r in caplog.records if r.getMessage().startswith("clients directory: skipped")]
    writable = f"{clients}/writable.key: writable by group and others (mode 666)"
    assert any(writable in m and f"chmod go-w {clients}/writable.key" in m for m in skipped), skipped
    for name, kind in (("linked", "a symbolic link"), ("fifo", "a FIFO"), ("folder", "a directory")):
        assert any(f"{clients}/{name}.key: not a regular file ({kind})" in m for m in skipped), skipped
    if foreign:
        assert any(f"{clients}/foreign.key: owned by uid {NOBODY}" in m and "chown" in m for m in skipped)
    assert len(skipped) == 4 + foreign, skipped


def test_the_reread_on_change_applies_the_same_checks(tmp_path, caplog):
    """A key file made writable by others is skipped from the next handshake on (a chmod changes
    no time of the directory's); a directory made writable by others refuses every key until it
    is fixed."""
    clients, public = _clients_with(tmp_path, "alice", "bob")
    accepted = ClientKeys(str(clients))
    assert accepted.callback("portal-shm", public["alice"]) and accepted.callback("portal-shm", public["bob"])
    with caplog.at_level(logging.WARNING, logger="portal_shm.host"):
        os.chmod(clients / "bob.key", 0o646)
        assert not accepted.callback("portal-shm", public["bob"])
        assert accepted.callback("portal-shm", public["alice"])
        assert f"skipped {clients}/bob.key: writable by others (mode 646)" in caplog.text
        os.chmod(clients, 0o777)
        assert not accepted.callback("portal-shm", public["alice"])
        assert f"clients directory {clients} is writable by group and others (mode 777)" in caplog.text
        assert "every client key is refused until then" in caplog.text
    os.chmod(clients, 0o700)
    os.chmod(clients / "bob.key", 0o644)
    assert accepted.callback("portal-shm", public["alice"]) and accepted.callback("portal-shm", public["bob"])
