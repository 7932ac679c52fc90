"""Start-up that says what it is doing: silent when quick, a status line on a terminal, log lines
elsewhere; ``stats()`` keeps each server's start-up time and whether it was forked."""

from __future__ import annotations

import logging

import portal_shm
from portal_shm.agent.contract import start_progress
from portal_shm.agent.contract.start_progress import StartProgress


def test_a_quick_start_says_nothing(caplog):
    caplog.set_level(logging.INFO, logger="portal_shm.start")
    progress = StartProgress("8 envs", 2, "env servers", terminal=False)
    progress.update()
    progress.update()
    progress.close()
    assert caplog.records == []


def test_off_a_terminal_a_slow_start_logs_where_it_is_and_its_time(caplog, monkeypatch):
    caplog.set_level(logging.INFO, logger="portal_shm.start")
    monkeypatch.setattr(start_progress, "QUIET_S", 0.0)
    monkeypatch.setattr(start_progress, "LOG_EVERY_S", 0.0)
    progress = StartProgress("256 envs on 1 env host(s)", 1, "hosts", terminal=False)
    progress.update(0)
    progress.update(1)
    progress.close()
    lines = [record.getMessage() for record in caplog.records]
    assert lines[0].startswith("starting 256 envs on 1 env host(s): 0/1 hosts ready (")
    assert lines[-1].startswith("started 256 envs on 1 env host(s): 1 hosts in ")


def test_on_a_terminal_a_slow_start_shows_a_status_line_that_goes_at_the_end(monkeypatch, capsys):
    monkeypatch.setattr(start_progress, "QUIET_S", 0.0)
    progress = StartProgress("64 envs", 64, "env servers", terminal=True)
    progress.update(10)
    assert progress.status is not None and "10/64 env servers ready" in progress.text()
    progress.update()
    assert "11/64" in progress.text()
    progress.close()
    assert progress.status is None


def test_stats_give_each_servers_start_up_time_and_whether_it_was_forked():
    envs = portal_shm.make_vec("CartPole-v1", 4, vector_kwargs={"envs_per_server": 1})
    try:
        servers = envs.stats()["servers"]
    finally:
        envs.close()
    assert len(servers) == 4
    for server in servers:
        assert server["forked"] is True
        assert isinstance(server["startup_s"], float) and 0 < server["startup_s"] < 120


def test_the_cli_prints_the_lines_on_stderr_and_an_env_host_logs_them_with_the_rest(monkeypatch, capsys):
    import argparse

    from portal_shm.cli import app
    from portal_shm.cli.remote import cmd_host

    log = logging.getLogger("portal_shm.start")
    monkeypatch.setattr(log, "handlers", [])
    monkeypatch.setattr(log, "propagate", True)
    app._progress_lines(argparse.Namespace(func=cmd_host))
    assert log.handlers == []
    app._progress_lines(argparse.Namespace(func=app.cmd_run))
    monkeypatch.setattr(start_progress, "QUIET_S", 0.0)
    progress = StartProgress("64 envs", 1, "env servers", terminal=False)
    progress.update()
    progress.close()
    assert "portal-shm: started 64 envs: 1 env servers in " in capsys.readouterr().err
