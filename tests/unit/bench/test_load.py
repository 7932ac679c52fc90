"""Other work on the machine during a benchmark (``portal_shm.bench.load``): the verdict from
readings of /proc/stat, how the table and the JSON carry it, and the meter's own accounting of the
benchmark's processes against a child that burns CPU."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from portal_shm.bench.load import TICK, LoadMeter, Reading, judge
from portal_shm.bench.machine import cpu_fields
from portal_shm.bench.report import write_json
from portal_shm.bench.table import render_text


def readings(cores: int, spans: list, start: tuple = (5000, 20, 3000, 90000, 400, 0, 60, 0, 0, 0)) -> list:
    """/proc/stat ``cpu`` lines one second apart, each span ``(busy cores, own cores)``: what the
    machine's cores and the benchmark's processes worked in it. Busy time goes to user and system,
    the rest to idle, as the kernel counts it."""
    fields = list(start)
    own = 0.0
    lines = [("cpu  " + " ".join(map(str, fields)), own)]
    for busy, mine in spans:
        work = round(busy * TICK)
        fields[0] += work * 3 // 4  # user
        fields[2] += work - work * 3 // 4  # system
        fields[3] += cores * TICK - work  # idle
        own += mine * TICK
        lines.append(("cpu  " + " ".join(map(str, fields)), own))
    return [Reading(cpu_fields(line), mine) for line, mine in lines]


def test_cpu_fields_reads_the_aggregate_line_only():
    assert cpu_fields("cpu  10 0 5 100 1 0 2 0 0 0") == [10, 0, 5, 100, 1, 0, 2, 0, 0, 0]
    assert cpu_fields("cpu0 10 0 5 100 1 0 2 0 0 0") is None and cpu_fields("intr 1 2") is None


def test_a_busy_laptop_skews_the_run_and_says_how_much():
    # 2 cores: the benchmark used 0.6 of them, everything else 1.4
    load = judge(readings(2, [(2.0, 0.6)] * 4), cores=2)
    assert load["skewed"] and load["other_cores"] == pytest.approx(1.4) and load["own_cores"] == pytest.approx(0.6)
    assert load["seconds"] == pytest.approx(4.0) and load["readings"] == 5
    assert load["warning"] == (
        "other processes used 1.4 of 2 cores during the run: figures are skewed; rerun on a quiet machine"
    )


def test_a_quiet_machine_is_not_skewed():
    load = judge(readings(2, [(1.1, 1.0)] * 4), cores=2)  # a tenth of a core of other work
    assert not load["skewed"] and load["warning"] is None and load["other_cores"] == pytest.approx(0.1)


def test_a_core_of_others_on_a_big_idle_machine_is_no_skew_but_on_a_full_one_it_is():
    roomy = judge(readings(64, [(11.0, 8.0)] * 3), cores=64)  # 3 of 64 cores: 5 %, and the cores idle
    assert not roomy["skewed"] and roomy["other_cores"] == pytest.approx(3.0)
    full = judge(readings(16, [(15.0, 14.0)] * 3), cores=16)  # 1 of 16 cores, but they were all busy
    assert full["skewed"] and "other processes used 1.0 of 16 cores" in full["warning"]


def test_a_burst_shows_as_the_worst_moment():
    load = judge(readings(2, [(0.5, 0.5)] * 3 + [(2.0, 0.2)]), cores=2)  # 1.8 cores of others in the last second
    assert load["other_cores"] == pytest.approx(0.45) and load["other_cores_max"] == pytest.approx(1.8)
    assert not load["skewed"]  # on average under half a core
    load = judge(readings(2, [(1.6, 0.6)] * 3 + [(2.0, 0.2)]), cores=2)
    assert load["skewed"] and "during the run (up to 1.8 at times)" in load["warning"]


def test_the_benchmarks_own_processes_are_never_other_work():
    # the machine busier than the benchmark cannot make "other" negative, nor can one reading judge
    load = judge(readings(4, [(1.0, 1.5)] * 2), cores=4)
    assert load["other_cores"] == 0.0 and not load["skewed"]
    assert judge(readings(4, []), cores=4) is None


def test_the_warning_is_in_the_table_and_the_json(tmp_path):
    load = judge(readings(2, [(2.0, 0.6)] * 4), cores=2)
    report = {
        "options": {"baseline": "async", "repeat": 1, "seconds": 1.0},
        "machine": {
            "cpu_model": "test",
            "cpu_count": 2,
            "mem_total_bytes": 2**30,
            "python": "3",
            "cpu_steal_share": None,
            "versions": {},
        },
        "load": load,
        "summary": [],
        "skipped": [],
        "errors": [],
        "notes": [],
        "targets": [],
        "leftover_shm": [],
        "interrupted": False,
        "transport_bound": [],
    }
    text = render_text(report, width=400)
    assert f"warning: {load['warning']}" in text
    assert "other processes 1.4 cores on average during the run" in text
    write_json(report, str(tmp_path / "r.json"))
    assert json.loads((tmp_path / "r.json").read_text())["load"]["warning"] == load["warning"]


def test_the_meter_counts_a_child_that_burns_cpu_as_the_benchmarks_own():
    meter = LoadMeter()
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time\nwhile time.process_time() < 0.5: pass\nprint('done', flush=True)\nsys.stdin.read()",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        meter.read()  # the child is under this process from the first reading on
        assert child.stdout.readline() == "done\n"  # it has burnt half a second of CPU, and lives
        meter.read()
    finally:
        child.communicate("")
    spent = meter.readings[-1].own_ticks - meter.readings[0].own_ticks
    assert spent >= 0.4 * TICK  # the child's CPU (ticks are 10 ms): the benchmark's, not others'
    load = meter.result()
    assert load is not None and load["readings"] == 2 and load["own_cores"] > 0
