"""When an env is too cheap to rank runners by more than their transports (``portal_shm.bench.cheap_env``):
the condition, from summary rows as ``stats.summarize`` makes them, and the line the table prints."""

from __future__ import annotations

import pytest

from portal_shm.bench.cheap_env import CHEAP_SHARE, env_share, transport_bound
from portal_shm.bench.stats import summarize


def rows(rates: dict, scenario: str = "CartPole-v1") -> list:
    """Summary rows from one sample per ``(N, system) -> env-steps/s``."""
    samples = [
        {"scenario": scenario, "num_envs": n, "system": system, "repeat": 0, "steps_per_s": rate}
        for (n, system), rate in rates.items()
    ]
    return summarize(samples, "async", ["portal-process", "sync", "async", "raw", "ceiling"])


def test_env_share_is_the_envs_part_of_the_runners_cores():
    assert env_share(300_000, 200_000, 8, 8) == pytest.approx(0.1875)  # 1.5 envs' worth of 8 cores
    assert env_share(300_000, 200_000, 8, 2) == pytest.approx(0.75)  # the same rate on 2 cores
    assert env_share(40_000, 6_000, 8, 16) == pytest.approx(40 / 6 / 8)  # N below the cores: N count


def test_a_cheap_env_makes_every_parallel_runner_transport_bound():
    # CartPole: 5 us a step; 8 envs on 8 cores could make 1.6 M steps/s, the runners make a fraction
    found = transport_bound(
        rows({(8, "portal-process"): 300_000, (8, "async"): 60_000, (8, "sync"): 150_000, (8, "raw"): 200_000}), 8
    )
    (line,) = found
    assert line["scenario"] == "CartPole-v1" and line["num_envs"] == [8]
    assert line["env_step_us"] == pytest.approx(5.0) and line["env_share"] == pytest.approx(0.1875)
    assert line["text"] == (
        "CartPole-v1 steps in ~5.0 us: every parallel runner is bound by its transport here, not by the env "
        "(its own steps are at most 19% of their time); the gap between runners is the transport's cost"
    )


def test_an_expensive_env_binds_the_runners_and_gets_no_line():
    # Pong: 160 us a step; portal makes 80 % of what 8 cores give it
    assert transport_bound(rows({(8, "portal-process"): 40_000, (8, "async"): 25_000, (8, "raw"): 6_250}), 8) == []


def test_the_in_process_serial_runner_does_not_decide():
    # sync steps one env after another in the agent: its rate over N cores says nothing of a transport
    cheap = {(4, "portal-process"): 50_000, (4, "raw"): 100_000}
    assert transport_bound(rows({**cheap, (4, "sync"): 400_000}), 4)  # sync left out: still cheap
    assert not transport_bound(rows({**cheap, (4, "async"): 400_000}), 4)  # a parallel runner that is not


def test_cheap_at_some_n_names_them():
    rates = {
        (2, "portal-process"): 100_000,  # 2 envs on 2 cores: a quarter in the env
        (2, "raw"): 200_000,
        (8, "portal-process"): 600_000,  # 8 envs on 4 cores: three quarters
        (8, "raw"): 200_000,
    }
    (line,) = transport_bound(rows(rates), 4)
    assert line["num_envs"] == [2] and line["env_share"] == pytest.approx(0.25) and 0.25 <= CHEAP_SHARE
    assert "bound by its transport here at N=2, not by the env" in line["text"]


def test_no_raw_reference_no_line():
    # a null env has no raw loop (and the table says what it is), nor has a run with --no-references
    assert transport_bound(rows({(8, "portal-process"): 300_000, (8, "async"): 60_000}, "null:8x8x1"), 8) == []


def test_the_table_prints_the_line_after_a_load_warning():
    from portal_shm.bench.table import meaning_lines

    found = transport_bound(rows({(8, "portal-process"): 300_000, (8, "raw"): 200_000}), 8)
    load = {"warning": "other processes used 1.4 of 2 cores during the run: figures are skewed"}
    assert meaning_lines({"load": load, "transport_bound": found}) == [
        ("bold yellow", f"warning: {load['warning']}"),
        ("bold", found[0]["text"]),
    ]
    assert meaning_lines({"load": None, "transport_bound": []}) == []
