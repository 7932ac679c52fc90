"""How much of the machine other work took while a benchmark ran, and whether that skewed it.

A benchmark's figures hold for the cores it had. On a laptop that builds something or a box
running another job, other processes take cores, and a system that needs many (a server per env)
loses more of its speed than one stepping in the agent's process: the ranking itself can turn.

So the runner reads the machine's busy CPU time (the aggregate line of /proc/stat) and the CPU
time of the benchmark's own processes (this process, every process under it, and the env servers
it follows: the docker backend's containers are not its children) at the start, after every
timed run and at the end: never during a run, so reading /proc costs no run anything. What the
machine spent beyond the benchmark's own is other work. Own time is taken per process as the
change since the last reading, so a process that comes or goes moves no one else's figure; the
last moments of processes that exit between readings (systems closing) are lost to "other", a
few ticks. Linux only: elsewhere there is no load figure.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Iterable, Optional, Sequence

from .cpu import descendants, process_ticks
from .machine import read_cpu_times

TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
MIN_OTHER_CORES = 0.5  # less than half a core of other work on average never counts as skew
OTHER_SHARE = 0.1  # ... from there, others taking a tenth of the cores skews the figures
CROWDED = 0.9  # ... and so does any such share when the benchmark and others filled the cores
WINDOW_S = 1.0  # the worst moment is taken over spans of at least this long (ticks are 10 ms)


@dataclass(frozen=True)
class Reading:
    """One look at the machine: /proc/stat's aggregate ``cpu`` fields (ticks since boot: user nice
    system idle iowait irq softirq steal ...) and the ticks the benchmark's processes spent so far."""

    cpu: Sequence[int]
    own_ticks: float


def busy_ticks(cpu: Sequence[int]) -> int:
    """Ticks the cores worked: user, nice, system, irq, softirq (guest time is inside user)."""
    return cpu[0] + cpu[1] + cpu[2] + cpu[5] + cpu[6]


def all_ticks(cpu: Sequence[int]) -> int:
    """Ticks of every core, working, idle or stolen: the wall time of the span times the cores."""
    return sum(cpu[:8])


def judge(readings: Sequence[Reading], cores: int) -> Optional[dict]:
    """Other work over the readings, and the warning when it skewed the figures; None with fewer
    than two readings. ``{cores, seconds, readings, own_cores, other_cores, other_cores_max,
    skewed, warning}``: cores' worth on average (1.0: one core busy all along), the worst over spans of
    at least ``WINDOW_S``."""
    if len(readings) < 2 or cores < 1:
        return None
    spans = []  # (wall ticks per core, own ticks, other ticks) between consecutive readings
    for a, b in zip(readings, readings[1:]):
        wall = (all_ticks(b.cpu) - all_ticks(a.cpu)) / cores
        own = max(0.0, b.own_ticks - a.own_ticks)
        other = max(0.0, busy_ticks(b.cpu) - busy_ticks(a.cpu) - own)
        spans.append((wall, own, other))
    wall = sum(s[0] for s in spans)
    if wall <= 0:
        return None
    own, other = sum(s[1] for s in spans) / wall, sum(s[2] for s in spans) / wall
    worst, window = other, [0.0, 0.0]
    for span_wall, _, span_other in spans:
        window[0] += span_wall
        window[1] += span_other
        if window[0] >= WINDOW_S * TICK:
            worst = max(worst, window[1] / window[0])
            window = [0.0, 0.0]
    skewed = other >= MIN_OTHER_CORES and (other >= OTHER_SHARE * cores or own + other >= CROWDED * cores)
    return {
        "cores": cores,
        "seconds": wall / TICK,
        "readings": len(readings),
        "own_cores": own,
        "other_cores": other,
        "other_cores_max": worst,
        "skewed": skewed,
        "warning": warning(other, worst, cores) if skewed else None,
    }


def warning(other: float, worst: float, cores: int) -> str:
    """The line the table and the JSON carry when other work skewed the run."""
    peak = f" (up to {worst:.1f} at times)" if worst >= other + 0.3 else ""
    return (
        f"other processes used {other:.1f} of {cores} cores during the run{peak}: "
        "figures are skewed; rerun on a quiet machine"
    )


class LoadMeter:
    """Readings of the machine and of the benchmark's processes, taken when the runner asks."""

    def __init__(self, root: Optional[int] = None) -> None:
        self.roots = {os.getpid() if root is None else root}
        self.last: dict[int, int] = {}  # pid -> its ticks at the last reading
        self.own = 0.0
        self.readings: list[Reading] = []

    def follow(self, pids: Iterable[int]) -> None:
        """Count these processes and theirs as the benchmark's too (env servers that are not children)."""
        self.roots.update(pids)

    def read(self) -> None:
        """Take a reading (a no-op where /proc/stat is not there)."""
        cpu = read_cpu_times()
        if cpu is None or len(cpu) < 8:
            return
        now: dict[int, int] = {}
        for pid in self.roots | descendants(self.roots):
            ticks = process_ticks(pid)
            if ticks is not None:
                now[pid] = ticks
        self.roots &= set(now)  # a root that went may come back as someone else's pid
        for pid, ticks in now.items():
            before = self.last.get(pid, 0)
            self.own += ticks - before if ticks >= before else ticks  # lower: the pid was reused
        if not self.readings:
            self.own = 0.0  # what ran before the first reading is no part of the benchmark
        self.last = now
        self.readings.append(Reading(cpu, self.own))

    def result(self, cores: Optional[int] = None) -> Optional[dict]:
        """``judge`` over the readings so far."""
        return judge(self.readings, cores or os.cpu_count() or 1)
