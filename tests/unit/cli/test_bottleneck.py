"""The verdict in words (``portal_shm.cli.bottleneck``): from a report's figures through
``bound.verdict`` to the ``bound by`` and ``next step`` lines ``run`` prints and ``top`` shows, and
the ``portal-shm bench`` command ``run`` offers to compare with."""

from __future__ import annotations

import time

import numpy as np
import pytest
from rich.console import Console

import portal_shm
from portal_shm.agent.stats.bound import verdict
from portal_shm.cli.bottleneck import BOUND_BY, compare_command, half_batch, next_step, verdict_lines
from portal_shm.cli.top import render
from portal_shm.cli.top_model import PortalView, TopModel


def report(num_envs=4, servers=2, away=0.1, busy=0.2, p50=None, calls_per_s=1000.0, hosts=False):
    """A stats() report as a local portal's StatsReader shapes it, judged by the real ``verdict``."""
    per = num_envs // servers
    out = {
        "window_s": 2.0,
        "steps_per_s": 5000.0,
        "agent": {"calls_per_s": calls_per_s, "away": away, "inside": 1 - away},
        "ring": {"bytes_per_s": 1e6},
        "envs": [
            {
                "env": i,
                "steps": 100,
                "latency_us": {"p50": (p50 or {}).get(i, 10.0), "p90": 12.0, "p99": 20.0, "samples": 50},
            }
            for i in range(num_envs)
        ],
        "servers": [
            {"server": j, "envs": list(range(j * per, (j + 1) * per)), "busy": busy, "steps_per_s": 2500.0}
            for j in range(servers)
        ],
    }
    if hosts:
        out["hosts"] = [{"address": "10.0.0.2:7000"}]
    out["bound"] = verdict(out)
    return out


CASES = [  # (figures, batch_size, cores, verdict, what the next step must say)
    (
        dict(away=0.7),
        None,
        8,
        "agent",
        "policy/learner is the bottleneck: speed it up or step in async batches (batch_size=2)",
    ),
    (dict(away=0.7), 2, 8, "agent", "speed it up or give it more envs per call; more servers or cores do not help"),
    (dict(away=0.7, num_envs=1, servers=1), None, 8, "agent", "speed it up or give it more envs per call"),
    (dict(p50={3: 200.0}), None, 8, "straggler", "env 3 step far slower than the rest"),
    (dict(busy=0.9), None, 8, "env", "add servers: envs_per_server=1 spreads the 4 envs over the 8 cores"),
    (dict(busy=0.9, num_envs=8), 4, 8, "env", "add servers: envs_per_server=1 spreads the 8 envs over the 8 cores"),
    (dict(busy=0.9, servers=4), None, 2, "env", "more cores (it has 2) or env hosts on other machines help"),
    (dict(busy=0.9, hosts=True), None, 8, "env", "the envs use the cores of the hosts: more hosts or cores help"),
    (
        dict(busy=0.1),
        None,
        8,
        "transport",
        "fewer, larger servers (envs_per_server=4), async batches (batch_size=2) or spinning (spin_wait) help",
    ),
    (
        dict(busy=0.1, num_envs=8, servers=4),
        4,
        8,
        "transport",
        "fewer, larger servers (envs_per_server=4), larger batches or spinning (spin_wait) help",
    ),
    (
        dict(busy=0.1, hosts=True),
        None,
        8,
        "transport",
        "async batches (batch_size=2) or compression (lz4) over the network help",
    ),
]


@pytest.mark.parametrize("figures, batch_size, cores, expected, says", CASES)
def test_each_verdict_names_its_next_step(figures, batch_size, cores, expected, says):
    stats = report(**figures)
    assert stats["bound"]["verdict"] == expected
    step = next_step(stats, batch_size, cores)
    assert says in step, step
    bound_by, next_line = verdict_lines(stats, batch_size, cores)
    assert bound_by == f"bound by: {BOUND_BY[expected]}: {stats['bound']['why']}"
    assert next_line == f"next step: {step}"


def test_no_verdict_yet_says_why_and_names_no_step():
    stats = report(calls_per_s=1.0)
    assert stats["bound"]["verdict"] is None and next_step(stats) is None
    assert verdict_lines(stats) == ["bound by: not known yet (only 2 portal calls in the window: too few to judge)"]


def test_half_batch_is_a_whole_number_of_servers_and_at_most_half():
    assert half_batch(8) == 4 and half_batch(8, 2) == 4 and half_batch(12, 4) == 4 and half_batch(9) == 3
    assert half_batch(6, 4) is None and half_batch(1) is None


def test_compare_command_runs_the_same_envs_against_async():
    assert compare_command("CartPole-v1", 4) == "portal-shm bench CartPole-v1 -n 4 --against async"
    assert compare_command("CartPole-v1", 8, "venv", batch_size=4, envs_per_server=2) == (
        "portal-shm bench CartPole-v1 -n 8 --against async --batch-size 4 --envs-per-server 2"
    )
    assert compare_command("ALE/Pong-v5", 8, "docker", batch_size=8, image="portal-shm/ale") == (
        "portal-shm bench ALE/Pong-v5 -n 8 --against async --backends docker --image portal-shm/ale"
    )
    assert compare_command("my envs:make", 2).startswith("portal-shm bench 'my envs:make' -n 2")


@pytest.mark.parametrize(
    "figures, verdict_name, says",
    [
        (dict(away=0.7), "agent", "next step your policy/learner is the bottleneck"),
        (dict(p50={1: 300.0}), "straggler", "next step env 1 step far slower"),
        (dict(busy=0.95, servers=4), "env", "next step the envs use the cores of this machine: more cores (it has"),
        (dict(busy=0.05), "transport", "next step the time goes to wake-ups, the ring and messages"),
    ],
)
def test_top_shows_the_next_step_under_the_verdict(figures, verdict_name, says):
    stats = report(**figures)
    info = {"env_id": "CartPole-v1", "num_envs": 4, "batch_size": None}
    view = PortalView("psm-1-ab", 1, "/nowhere", "live", 0.5, info, stats, 5.0)
    console = Console(record=True, width=400, color_system=None)
    console.print(render([view], TopModel(), max_envs=4, live=False))
    text = console.export_text()
    assert f"verdict {verdict_name}: {stats['bound']['why']}" in text
    assert says in text, text


def test_lines_from_a_real_portals_stats():
    envs = portal_shm.make_vec("CartPole-v1", 2)
    try:
        envs.reset(seed=0)
        actions = np.zeros(2, np.int64)
        end = time.monotonic() + 1.0
        while time.monotonic() < end:
            envs.step(actions)
        stats = envs.stats(window=1.0)
    finally:
        envs.close()
    what = stats["bound"]["verdict"]
    assert what in BOUND_BY  # a second of steps is plenty to judge
    lines = verdict_lines(stats)
    assert lines == [f"bound by: {BOUND_BY[what]}: {stats['bound']['why']}", f"next step: {next_step(stats)}"]
