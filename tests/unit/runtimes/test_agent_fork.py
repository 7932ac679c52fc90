"""When the process backend's zygote may be a fork of the agent (``runtimes/agent_fork.py``): only
from an agent as quiet as a fresh interpreter; the forks themselves are tested in
``tests/integration/test_forked_servers.py``."""

from __future__ import annotations

import sys
import threading
import types

import pytest

from portal_shm.runtimes import agent_fork

pytestmark = pytest.mark.fast


def test_a_python_thread_in_the_agent_is_named_as_the_reason():
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait, daemon=True)
    thread.start()
    try:
        assert "other Python thread(s)" in (agent_fork.why_not() or "")
    finally:
        stop.set()
        thread.join()


@pytest.mark.parametrize("framework", agent_fork.UNFORKABLE_MODULES)
def test_a_framework_whose_threads_do_not_survive_a_fork_is_named(monkeypatch, framework):
    monkeypatch.setattr(threading, "active_count", lambda: 1)
    for name in agent_fork.UNFORKABLE_MODULES:  # (another test of this process may have imported one)
        monkeypatch.delitem(sys.modules, name, raising=False)
    monkeypatch.setitem(sys.modules, framework, types.ModuleType(framework))
    assert agent_fork.why_not() == f"the agent has imported {framework}"


def test_an_agent_bigger_than_the_limit_starts_its_zygote_fresh(monkeypatch):
    monkeypatch.setattr(threading, "active_count", lambda: 1)
    for name in agent_fork.UNFORKABLE_MODULES:
        monkeypatch.delitem(sys.modules, name, raising=False)
    monkeypatch.setattr(agent_fork, "_settled", lambda limit: True)
    monkeypatch.setattr(agent_fork, "MAX_AGENT_RSS", 1 << 20)
    assert agent_fork.why_not() == "the agent holds more than 1 MiB"
