"""Whose env containers ``portal-shm gc`` may take, judged from the host and from an agent's container."""

import os
import subprocess
import sys

import pytest

from portal_shm.runtimes import containers
from portal_shm.runtimes.docker import LABEL_OWNER


@pytest.fixture(scope="module")
def dead_pid() -> int:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def test_on_the_host_a_host_agent_is_judged_by_its_pid(monkeypatch, dead_pid):
    monkeypatch.setattr(containers, "own_container_id", lambda: None)
    assert not containers.owner_alive(None, {LABEL_OWNER: str(dead_pid)})
    assert containers.owner_alive(None, {LABEL_OWNER: str(os.getpid())})


def test_in_a_container_a_host_agent_s_pid_is_not_judged(monkeypatch, dead_pid):
    """Its pid is the host's pid namespace's: gc in an agent's container must leave it alone."""
    monkeypatch.setattr(containers, "own_container_id", lambda: "a" * 64)
    assert containers.owner_alive(None, {LABEL_OWNER: str(dead_pid)})


def test_in_its_own_container_an_agent_is_judged_by_its_pid(monkeypatch, dead_pid):
    monkeypatch.setattr(containers, "own_container_id", lambda: "a" * 64)
    labels = {LABEL_OWNER: str(dead_pid), containers.LABEL_AGENT_CONTAINER: "a" * 64}
    assert not containers.owner_alive(None, labels)
