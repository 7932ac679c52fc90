"""portal-shm bench: statistics, scenario parsing, skips, --batch-size, and the JSON schema of a
tiny real run (null env, N=2, 0.2 s runs)."""

from __future__ import annotations

import dataclasses
import json

import pytest

from portal_shm.bench import BenchError, BenchOptions, ScenarioError, parse_scenario, parse_scenarios, run_bench
from portal_shm.bench.cli import main
from portal_shm.bench.report import SCHEMA_VERSION
from portal_shm.bench.stats import paired_ratios, spread, summarize
from portal_shm.bench.systems import SYSTEMS, module_missing

MISSING = "psm_bench_no_such_module"


def sample(system, repeat, rate, scenario="null:8x8x1", n=2):
    return {
        "scenario": scenario,
        "num_envs": n,
        "system": system,
        "repeat": repeat,
        "steps_per_s": rate,
        "p50_us": 10.0 * (repeat + 1),
        "p99_us": 100.0,
        "agent_cpu": 0.5,
    }


# --- statistics -----------------------------------------------------------------------------


def test_spread_gives_median_min_max_of_finite_values():
    assert spread([3.0, 1.0, 2.0, None, float("nan")]) == {"median": 2.0, "min": 1.0, "max": 3.0, "n": 3}
    assert spread([4.0, 1.0]) == {"median": 2.5, "min": 1.0, "max": 4.0, "n": 2}
    assert spread([]) is None and spread([None]) is None


def test_paired_ratios_pair_runs_of_the_same_round():
    assert paired_ratios({0: 10.0, 1: 30.0, 2: 20.0}, {0: 5.0, 1: 30.0, 2: 40.0}) == [2.0, 1.0, 0.5]
    assert paired_ratios({0: 10.0, 1: 30.0}, {1: 15.0}) == [2.0]  # rounds only one side has are left out


def test_summary_ratio_is_median_of_pairs_not_ratio_of_medians():
    a, base = [10.0, 30.0, 20.0], [5.0, 30.0, 40.0]  # pairs: 2, 1, 0.5 -> median 1.0; medians: 20/30
    samples = [sample("portal-process", r, v) for r, v in enumerate(a)]
    samples += [sample("async", r, v) for r, v in enumerate(base)]
    samples += [
        sample(
            "ceiling",
            r,
            v,
        )
        for r, v in enumerate([20.0, 20.0, 10.0])
    ]
    rows = summarize(samples, "async", ["portal-process", "async", "raw", "ceiling"])
    assert [r["system"] for r in rows] == ["portal-process", "async", "ceiling"]
    portal = rows[0]
    assert portal["steps_per_s"] == {"median": 20.0, "min": 10.0, "max": 30.0, "n": 3}
    assert portal["x_baseline"] == {"median": 1.0, "min": 0.5, "max": 2.0, "n": 3}
    assert portal["x_ceiling"] == {"median": 1.5, "min": 0.5, "max": 2.0, "n": 3}
    assert portal["p50_us"] == 20.0 and portal["agent_cpu"] == 0.5
    assert rows[1]["x_baseline"]["median"] == 1.0


def test_summary_orders_scenarios_as_run_then_n_then_systems():
    samples = [
        sample("sync", 0, 1.0, "b", 8),
        sample("portal-process", 0, 1.0, "b", 2),
        sample("portal-process", 0, 1.0, "a", 8),
        sample("sync", 0, 1.0, "b", 2),
    ]
    rows = summarize(samples, "sync", ["portal-process", "sync"])
    assert [(r["scenario"], r["num_envs"], r["system"]) for r in rows] == [
        ("b", 2, "portal-process"),
        ("b", 2, "sync"),
        ("b", 8, "sync"),
        ("a", 8, "portal-process"),
    ]


# --- scenarios ------------------------------------------------------------------------------


def test_scenarios_parse():
    null = parse_scenario("null:210x160x3")
    assert null.shape == (210, 160, 3) and null.is_null and null.target.endswith(":NullEnv")
    assert null.docker_image() == "portal-shm/ale" and null.envpool_task() is None
    pong = parse_scenario("ALE/Pong-v5")
    assert pong.is_game and pong.docker_image() == "portal-shm/ale" and pong.envpool_task() == "Pong-v5"
    assert parse_scenario("VizdoomBasic-v1").docker_image() == "portal-shm/vizdoom"
    own = parse_scenario("mypkg.envs:make_env")
    assert own.target == "mypkg.envs:make_env" and own.docker_image() is None and own.docker_image("me/img") == "me/img"
    assert [s.name for s in parse_scenarios(["null:4", "CartPole-v1", "null:4"])] == ["null:4", "CartPole-v1"]


@pytest.mark.parametrize("text", ["null:", "null:0x3", "null:84xAx4", "null:-1", "mod:", ":fn", "two words", "a:b:c"])
def test_bad_scenarios_are_refused(text):
    with pytest.raises(ScenarioError):
        parse_scenario(text)


def test_cli_refuses_a_bad_scenario_as_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["null:0x3", "-q"])
    assert exc.value.code == 2
    assert "null:AxBxC" in capsys.readouterr().err


# --- systems that cannot run ----------------------------------------------------------------


def test_module_missing_points_at_any_module():
    assert module_missing("json", "pip install nothing") is None
    reason = module_missing(MISSING, "pip install it")
    assert reason.startswith("not installed") and MISSING in reason and "pip install it" in reason


def test_batch_size_runs_async_batches_beside_lockstep(tmp_path):
    """A tiny real run: portal-process in async batches, portal-lockstep beside it, same JSON schema."""
    out = tmp_path / "batch.json"
    main(
        [
            "null:8x8x1",
            "-n",
            "4",
            "--batch-size",
            "2",
            "--against",
            "portal-lockstep",
            "--seconds",
            "0.2",
            "--repeat",
            "1",
            "--no-references",
            "--json",
            str(out),
            "-q",
        ]
    )
    report = json.loads(out.read_text())
    modes = {(r["system"], r["mode"]) for r in report["samples"]}
    assert modes == {("portal-process", "batch"), ("portal-lockstep", "lockstep")}
    assert all(r["env_steps"] > 0 and r["steps_per_s"] > 0 for r in report["samples"])
    assert report["options"]["batch_size"] == 2


def test_unknown_baseline_and_bad_numbers_are_refused():
    scenarios = parse_scenarios(["null:8x8x1"])
    with pytest.raises(BenchError, match="baseline"):
        run_bench(BenchOptions(scenarios, num_envs=[2], against=["sync"], baseline="async"))
    with pytest.raises(BenchError, match="positive"):
        run_bench(BenchOptions(scenarios, num_envs=[2], repeat=0))


# --- a tiny real run and its JSON -----------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_report():
    registry = {**SYSTEMS, "envpool": dataclasses.replace(SYSTEMS["envpool"], module=MISSING)}
    options = BenchOptions(
        parse_scenarios(["null:8x8x1"]),
        num_envs=[2],
        against=["sync", "envpool"],
        seconds=0.2,
        repeat=2,
        warmup=3,
        alloc_steps=20,
    )
    return run_bench(options, registry=registry, command=["test"])


SPREAD = {"median": float, "min": float, "max": float, "n": int}
SAMPLE = {
    "scenario": str,
    "num_envs": int,
    "system": str,
    "repeat": int,
    "mode": str,
    "steps_per_s": float,
    "p50_us": float,
    "p99_us": float,
    "agent_cpu": float,
    "cpu_s_per_1k_steps": float,
    "batched_steps": int,
    "env_steps": int,
    "seconds": float,
}
SUMMARY = {
    "scenario": str,
    "num_envs": int,
    "system": str,
    "repeats": int,
    "steps_per_s": dict,
    "p50_us": float,
    "p99_us": float,
    "agent_cpu": float,
    "cpu_s_per_1k_steps": float,
}


def check(obj, types):
    for key, kind in types.items():
        assert key in obj, key
        assert isinstance(obj[key], kind), (key, obj[key])


def test_report_follows_the_schema(tiny_report, tmp_path):
    path = tmp_path / "out.json"
    from portal_shm.bench.report import write_json

    write_json(tiny_report, str(path))
    report = json.loads(path.read_text())  # what a reader of the file gets
    check(
        report,
        {
            "schema_version": int,
            "tool": str,
            "created": str,
            "duration_s": float,
            "command": list,
            "interrupted": bool,
            "options": dict,
            "machine": dict,
            "systems": list,
            "samples": list,
            "summary": list,
            "allocations": list,
            "skipped": list,
            "errors": list,
            "notes": list,
            "targets": list,
            "transport_bound": list,
            "leftover_shm": list,
        },
    )
    load = report["load"]  # read between the runs: the machine's busy time against this benchmark's
    check(load, {"cores": int, "seconds": float, "readings": int, "own_cores": float, "other_cores": float})
    assert load["readings"] == 2 * 2 + 2 and load["own_cores"] > 0  # first, after each of 4 runs, last
    assert isinstance(load["skewed"], bool) and (load["warning"] is None) == (not load["skewed"])
    assert report["transport_bound"] == []  # a null env has no raw loop to weigh the runners by
    assert report["schema_version"] == SCHEMA_VERSION == 1 and not report["interrupted"]
    check(
        report["options"],
        {
            "scenarios": list,
            "num_envs": list,
            "backends": list,
            "against": list,
            "baseline": str,
            "seconds": float,
            "repeat": int,
            "limits": dict,
        },
    )
    assert report["options"]["scenarios"] == ["null:8x8x1"] and report["options"]["baseline"] == "portal-process"
    check(report["machine"], {"cpu_count": int, "python": str, "platform": str, "versions": dict})
    assert report["machine"]["versions"]["portal-shm"] and report["machine"]["versions"]["gymnasium"]
    assert [s["name"] for s in report["systems"]] == ["portal-process", "sync", "envpool"]
    assert len(report["samples"]) == 4  # 2 systems x 2 rounds; envpool skipped
    for s in report["samples"]:
        check(s, SAMPLE)
        assert s["steps_per_s"] > 0 and s["mode"] == "lockstep" and s["p99_us"] >= s["p50_us"]
    assert [s["system"] for s in report["samples"]] == ["portal-process", "sync"] * 2  # interleaved rounds
    for s in report["samples"]:
        # CPU per 1,000 steps covers the agent process and its env servers: never less than the
        # agent's own share, and for portal more (the servers step the envs)
        system_cpu_s = s["cpu_s_per_1k_steps"] * s["env_steps"] / 1000
        assert system_cpu_s >= 0.95 * s["agent_cpu"] * s["seconds"] > 0
        if s["system"] == "portal-process":
            assert system_cpu_s > s["agent_cpu"] * s["seconds"]
    assert [(r["system"], r["repeats"]) for r in report["summary"]] == [("portal-process", 2), ("sync", 2)]
    for row in report["summary"]:
        check(row, SUMMARY)
        check(row["steps_per_s"], SPREAD)
        check(row["x_baseline"], SPREAD)
        assert row["x_ceiling"] is None  # no ceiling for the null env
    assert report["summary"][0]["x_baseline"]["median"] == 1.0
    (alloc,) = report["allocations"]
    assert alloc["system"] == "portal-process" and alloc["steps"] == 20 and alloc["steps_with_obs_sized_alloc"] == 0
    # the default copies one batch per step (into arrays the client owns), ring views none
    (target,) = [t for t in report["targets"] if "fresh arrays" in t["target"]]
    assert target["target"] == "null:8x8x1 N=2: portal-process one batch of fresh arrays per step, none retained"
    assert target["ok"] and 0 < target["value"] <= 1
    assert report["leftover_shm"] == [] and report["errors"] == []


def test_missing_package_is_skipped_with_the_reason_never_faked(tiny_report):
    (skip,) = tiny_report["skipped"]
    assert skip["system"] == "envpool" and skip["num_envs"] is None and skip["reason"].startswith("not installed")
    assert not [s for s in tiny_report["samples"] + tiny_report["summary"] if s["system"] == "envpool"]


def test_tables_and_plot_render(tiny_report, tmp_path):
    from portal_shm.bench.plot import matplotlib_missing, plot_report
    from portal_shm.bench.table import render_markdown, render_text

    text = render_text(tiny_report)
    assert "portal-process" in text and "skipped envpool" in text and "not installed" in text
    assert render_markdown(tiny_report).count("\n") == 4
    note = plot_report(tiny_report, str(tmp_path / "p.png"))
    if matplotlib_missing():
        assert note and "matplotlib" in note
    else:
        assert note is None and (tmp_path / "p.png").stat().st_size > 1000


def test_plot_of_one_n_is_a_bar_per_system(tiny_report, tmp_path):
    pytest.importorskip("matplotlib")
    import matplotlib.pyplot as plt
    from matplotlib.container import BarContainer

    from portal_shm.bench.plot import figure, plot_report

    assert plot_report(tiny_report, str(tmp_path / "bars.png")) is None and (tmp_path / "bars.png").stat().st_size
    fig = figure(tiny_report)
    try:
        (ax,) = [ax for ax in fig.axes if ax.get_visible()]
        containers = [c for c in ax.containers if isinstance(c, BarContainer)]
        assert [c.get_label() for c in containers] == ["portal-process", "sync"]  # one per runner, in order
        medians = [row["steps_per_s"]["median"] for row in tiny_report["summary"]]
        assert [c.patches[0].get_height() for c in containers] == pytest.approx(medians)
        assert ax.get_title() == "null:8x8x1, N=2"
        assert not {line.get_label() for line in ax.get_lines()} & {"portal-process", "sync"}  # no curves
    finally:
        plt.close(fig)


def test_plot_of_several_n_is_a_curve_per_system(tiny_report):
    pytest.importorskip("matplotlib")
    import matplotlib.pyplot as plt

    from portal_shm.bench.plot import figure

    at_four = [{**row, "num_envs": 4} for row in tiny_report["summary"]]
    fig = figure({**tiny_report, "summary": tiny_report["summary"] + at_four})
    try:
        (ax,) = [ax for ax in fig.axes if ax.get_visible()]
        assert not ax.containers and [line.get_label() for line in ax.get_lines()] == ["portal-process", "sync"]
        assert [list(line.get_xdata()) for line in ax.get_lines()] == [[2, 4], [2, 4]]
    finally:
        plt.close(fig)


def test_cli_runs_and_writes_json_and_table(tmp_path, capsys):
    out, table = tmp_path / "out.json", tmp_path / "table.txt"
    code = main(
        [
            "null:8x8x1",
            "-n",
            "2",
            "--seconds",
            "0.2",
            "--repeat",
            "1",
            "--against",
            "sync",
            "--alloc-steps",
            "0",
            "-q",
            "--json",
            str(out),
            "--table",
            str(table),
        ]
    )
    assert code == 0
    printed = capsys.readouterr().out
    assert "portal-process" in printed and "sync" in printed
    report = json.loads(out.read_text())
    assert report["command"][:3] == ["python", "-m", "portal_shm.bench"] and len(report["samples"]) == 2
    assert "x portal-process" in table.read_text() and "CPU s/1k steps" in table.read_text()


def test_schema_doc_names_every_top_level_field(tiny_report):
    import pathlib

    doc = (pathlib.Path(__file__).parents[3] / "benchmarks" / "SCHEMA.md").read_text()
    for key in tiny_report:
        assert f"| `{key}` |" in doc, key
