"""portal-shm tune: the search space, a real small search (CartPole-v1, 4 envs, three points, runs of
a fraction of a second), its report, ``load_tuning`` and its refusals, ``make_vec(tune=...)`` and the
CLI verb. Nothing here asserts a speed: the machine is noisy; structure and consistency are checked."""

from __future__ import annotations

import json
import math
import os
import statistics
import subprocess
import sys
import time

import pytest

import portal_shm
from portal_shm.bench.tune import PolicyLoad, TuneError, TuneOptions, tune
from portal_shm.bench.tune_space import Point, default_point, grid, layouts, spin_waits
from portal_shm.tuning import TuningError, load_tuning, merge_tuning

CORES = os.cpu_count() or 1
DEFAULT = default_point(4, CORES)  # what make_vec("CartPole-v1", 4) does here
SMALL = dict(
    envs_per_server=[2, 4],
    batch=True,
    batch_sizes=[2],
    spin_waits=[None],
    ring_depths=[4],
    refine=2,
    rounds=2,
    budget_s=8.0,
    policy_ms=0.2,
)


@pytest.fixture(scope="module")
def report():
    return tune(TuneOptions("CartPole-v1", 4, **SMALL))


@pytest.fixture
def tuning_file(tmp_path):
    def write(data: dict) -> str:
        path = tmp_path / "tune.json"
        path.write_text(json.dumps(data))
        return str(path)

    return write


def made_for(env_id="CartPole-v1", num_envs=4, cores=CORES, **vector_kwargs):
    return {"env_id": env_id, "num_envs": num_envs, "machine": {"cores": cores}, "vector_kwargs": vector_kwargs}


# --- the space ------------------------------------------------------------------------------


def test_space_holds_equal_servers_and_batches_of_whole_servers():
    assert layouts(8, 2, batch=False) == [(8, None), (4, None), (2, None)]  # at most 2 servers per core
    assert layouts(8, 2, batch=True) == [(8, None), (4, None), (2, None), (4, 4), (2, 2), (2, 4)]
    assert layouts(32, 2, batch=True)[3:] == [(16, 16), (8, 8), (8, 16)]  # at most 4 batches in flight
    assert layouts(12, 2, batch=True, envs_per_server=[4], batch_sizes=[4, 6, 8]) == [(4, None), (4, 4), (4, 8)]
    assert (4, None) in layouts(7, 2, batch=False)  # the default size (ceil(7/2)) even where it divides nothing
    points = grid(8, 2, batch=True, spins=[None, 0.0], ring_depths=[4, 2])
    assert len(points) == len(set(points)) == 6 * 2 * 2


def test_point_kwargs_leave_defaults_to_the_machine_and_labels_say_what_differs():
    assert Point(4, None, None, 4).vector_kwargs() == {"envs_per_server": 4}
    assert Point(4, 4, 0.0, 2).vector_kwargs() == {
        "envs_per_server": 4,
        "batch_size": 4,
        "spin_wait": 0.0,
        "ring_depth": 2,
    }
    assert Point(4, 4, 0.0, 2).label(8) == "2x4 batch 4 spin 0 depth 2"
    assert Point(8, None, None, 4).label(8) == "1x8 lockstep"
    assert default_point(8, 2) == Point(4, None, None, 4)


def test_spin_zero_is_dropped_where_it_is_the_default(monkeypatch):
    monkeypatch.setenv("PORTAL_SHM_SPIN_WAIT", "0")
    assert spin_waits() == [None]
    monkeypatch.setenv("PORTAL_SHM_SPIN_WAIT", "0.0002")
    assert spin_waits() == [None, 0.0]


def test_options_that_cannot_be_searched_are_refused_with_the_fix():
    with pytest.raises(TuneError, match="--batch-sizes needs --batch"):
        tune(TuneOptions("CartPole-v1", 4, batch_sizes=[2]))
    with pytest.raises(TuneError, match="no layout of 4 envs"):
        tune(TuneOptions("CartPole-v1", 4, envs_per_server=[5]))
    with pytest.raises(TuneError, match="ring-depth"):
        tune(TuneOptions("CartPole-v1", 4, ring_depths=[1]))


def test_a_search_in_which_nothing_runs_names_each_failure():
    options = TuneOptions("psm_no_such_env-v0", 2, envs_per_server=[2], spin_waits=[None], ring_depths=[4], budget_s=5)
    with pytest.raises(
        TuneError, match=r"no layout of 2 x psm_no_such_env-v0 could run: 1x2 lockstep: EnvNotFoundError"
    ):
        tune(options)


def test_policy_load_thinks_after_every_step_and_recv_and_passes_the_rest_through():
    class Envs:
        num_envs, batch_size = 4, 2

        def step(self, actions):
            return ("step", actions)

        def recv(self):
            return "batch"

    envs = PolicyLoad(Envs(), 0.002)
    begin = time.perf_counter()
    assert envs.step(1) == ("step", 1) and envs.recv() == "batch"
    assert time.perf_counter() - begin >= 0.004  # a busy-wait ends no earlier than asked
    assert envs.num_envs == 4 and envs.batch_size == 2


# --- a real search --------------------------------------------------------------------------


def test_report_names_env_machine_winner_and_every_point(report):
    assert report["env_id"] == "CartPole-v1" and report["num_envs"] == 4 and report["batch"] is True
    assert report["machine"]["cores"] == CORES and "cpu_model" in report["machine"]
    assert report["policy_ms"] == 0.2
    labels = {m["label"] for m in report["measured"]}
    space = {p.label(4) for p in grid(4, CORES, True, [2, 4], [2], [None], [4])}
    assert labels == space | {DEFAULT.label(4)}  # the default layout is measured even outside the space
    assert report["plan"]["space_points"] == 3
    for entry in report["measured"]:
        assert entry["error"] is None, entry
        assert entry["screen_steps_per_s"] > 0 and entry["startup_s"] > 0
        assert set(entry["vector_kwargs"]) <= {"envs_per_server", "batch_size", "spin_wait", "ring_depth"}
    probe = report["env"]
    assert probe["step_us"] > 0 and probe["episodes_seen"] > 0 and 0 < probe["reset_share"] < 1
    json.loads(json.dumps(report))  # plain JSON throughout


def test_winner_is_the_best_refined_point(report):
    refined = [m for m in report["measured"] if m["refine_steps_per_s"] is not None]
    assert 2 <= len(refined) <= SMALL["refine"] + 1  # the best two and the default layout, if not among them
    best = max(refined, key=lambda m: m["refine_steps_per_s"])
    assert [m for m in report["measured"] if m["winner"]] == [best]
    assert report["vector_kwargs"] == best["vector_kwargs"] and report["steps_per_s"] == best["refine_steps_per_s"]
    for entry in refined:
        assert len(entry["refine_rounds"]) == SMALL["rounds"]
        assert math.isclose(entry["refine_steps_per_s"], statistics.median(entry["refine_rounds"]))
    others = sorted((m for m in report["measured"] if not m["default"]), key=lambda m: -m["screen_steps_per_s"])
    default = [m for m in report["measured"] if m["default"]]  # refined always: the reference
    assert {m["label"] for m in refined} == {m["label"] for m in others[: SMALL["refine"]] + default}


def test_written_report_round_trips_through_load_tuning_and_make_vec(report, tmp_path):
    path = tmp_path / "tune.json"
    path.write_text(json.dumps(report))
    assert load_tuning(path, "CartPole-v1", 4) == report["vector_kwargs"]
    assert portal_shm.load_tuning(str(path)) == report["vector_kwargs"]
    envs = portal_shm.make_vec("CartPole-v1", 4, tune=str(path))
    try:
        kwargs = report["vector_kwargs"]
        assert len(envs.servers) == 4 // kwargs["envs_per_server"]
        assert envs.batch_size == kwargs.get("batch_size", 4)
    finally:
        envs.close()


# --- load_tuning and make_vec(tune=...) -----------------------------------------------------


def test_load_tuning_refuses_another_env_or_num_envs_naming_both(tuning_file):
    path = tuning_file(made_for(envs_per_server=2))
    with pytest.raises(TuningError, match=r"tuned for env 'CartPole-v1'.*not for 'ALE/Pong-v5'.*portal-shm tune"):
        load_tuning(path, "ALE/Pong-v5", 4)
    with pytest.raises(
        TuningError, match=r"num_envs=4 of 'CartPole-v1', not num_envs=8.*portal-shm tune CartPole-v1 -n 8"
    ):
        load_tuning(path, "CartPole-v1", 8)
    with pytest.raises(TuningError, match="not num_envs=8"):
        portal_shm.make_vec("CartPole-v1", 8, tune=path)  # refused before any server starts


def test_load_tuning_warns_when_the_cores_differ_and_refuses_what_is_no_tuning(tuning_file, tmp_path):
    with pytest.warns(UserWarning, match=f"{CORES + 1} cores, this one has {CORES}"):
        assert load_tuning(tuning_file(made_for(cores=CORES + 1, envs_per_server=2)), "CartPole-v1", 4) == {
            "envs_per_server": 2
        }
    with pytest.raises(TuningError, match="not a tuning written by `portal-shm tune`"):
        load_tuning(tuning_file({"envs_per_server": 2}))
    with pytest.raises(TuningError, match="no tuning file .*missing.json: write one with `portal-shm tune"):
        load_tuning(tmp_path / "missing.json")
    (tmp_path / "broken.json").write_text("{")
    with pytest.raises(TuningError, match="cannot read the tuning file"):
        load_tuning(tmp_path / "broken.json")


def test_explicit_vector_kwargs_win_and_a_layout_is_dropped_whole():
    tuned = {"envs_per_server": 2, "batch_size": 2, "ring_depth": 2}
    assert merge_tuning(tuned, None) == tuned
    assert merge_tuning(tuned, {"ring_depth": 4}) == {"envs_per_server": 2, "batch_size": 2, "ring_depth": 4}
    assert merge_tuning(tuned, {"batch_size": 4}) == {"batch_size": 4, "ring_depth": 2}  # no tuned server size
    assert merge_tuning(tuned, {"batch_size": 2}) == tuned  # the same value keeps the layout


@pytest.mark.parametrize("form", ["path", "report", "kwargs"])
def test_make_vec_applies_a_tuning_under_explicit_kwargs(form, tuning_file):
    data = made_for(envs_per_server=2, batch_size=2)
    tune_arg = {"path": tuning_file(data), "report": data, "kwargs": data["vector_kwargs"]}[form]
    envs = portal_shm.make_vec("CartPole-v1", 4, tune=tune_arg)
    try:
        assert len(envs.servers) == 2 and envs.batch_size == 2 and envs.ring_depth == 4
    finally:
        envs.close()
    envs = portal_shm.make_vec("CartPole-v1", 4, tune=tune_arg, vector_kwargs={"envs_per_server": 4, "ring_depth": 3})
    try:  # explicit server size: the tuned batches (made of servers of 2) are dropped with it
        assert len(envs.servers) == 1 and envs.batch_size == 4 and envs.ring_depth == 3
    finally:
        envs.close()


def test_make_vec_refuses_a_tune_argument_of_another_type():
    with pytest.raises(TypeError, match="tune= takes a path"):
        portal_shm.make_vec("CartPole-v1", 4, tune=4)


# --- the CLI verb ---------------------------------------------------------------------------


def test_cli_tune_prints_and_writes_the_winner(tmp_path):
    out = tmp_path / "tune.json"
    command = [sys.executable, "-m", "portal_shm", "tune", "CartPole-v1", "-n", "4", "--budget-s", "6"]
    command += ["--envs-per-server", "2,4", "--spin-wait", "default", "--ring-depth", "4", "--rounds", "2"]
    result = subprocess.run([*command, "--write", str(out), "--quiet"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    written = json.loads(out.read_text())
    assert f"vector_kwargs = {json.dumps(written['vector_kwargs'])}" in result.stdout
    assert f"tune='{out}'" in result.stdout and "winner:" in result.stdout
    assert written["command"][:4] == ["portal-shm", "tune", "CartPole-v1", "-n"]
    assert {m["label"] for m in written["measured"]} == {"2x2 lockstep", "1x4 lockstep", DEFAULT.label(4)}
    assert load_tuning(out, "CartPole-v1", 4) == written["vector_kwargs"]


def test_cli_tune_usage_errors_name_the_flag():
    result = subprocess.run(
        [sys.executable, "-m", "portal_shm", "tune", "CartPole-v1", "-n", "4", "--batch-sizes", "2"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "--batch-sizes needs --batch" in result.stderr and "usage: portal-shm tune" in result.stderr
