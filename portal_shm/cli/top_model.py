"""What ``portal-shm top`` shows, read from the run directories of the portals on this machine.

A portal is live while its owner pid exists and it holds the record lock on its ``agent.lock``
(the test ``portal-shm gc`` makes, the other way round); only run directories of this user are
looked at. Watching a portal costs it one ``stat`` a second and, while it steps, one report a
second (``portal_shm.agent.stats.publish``): ``top`` touches the watch file and reads the JSON, nothing
else. A portal whose report is missing or older than ``FRESH_S`` is idle (it is not stepping),
not broken. Reports are the user's own processes' output, but they are read defensively: a field
that is missing or not a number shows as unknown instead of stopping the view.
"""

from __future__ import annotations

import fcntl
import json
import math
import os
import re
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Optional

from ..agent.stats.publish import OUT, WATCH
from ..runtimes.resources import PREFIX, pid_alive, run_base_dir

FRESH_S = 3.0  # a portal writes once a second while it steps: older than this, it is idle
ONCE_WAIT_S = 2.5  # a snapshot waits this long for portals to answer the first touch
HISTORY = 30  # sparkline length: the last reports of each portal, server and env
BLOCKS = "▁▂▃▄▅▆▇█"
_RUN_DIR = re.compile(rf"^{PREFIX}-(?P<pid>\d+)-[0-9a-f]+$")


@dataclass
class PortalView:
    """One portal as ``top`` shows it: where it lives, whether it reports, and its last report."""

    tag: str
    pid: int
    run_dir: str
    state: str  # "live": a fresh report; "idle": none within FRESH_S (not stepping)
    age_s: Optional[float] = None  # how old the report is, None without one
    info: dict[str, Any] = field(default_factory=dict)  # the report's env_id, num_envs, ... (may be stale)
    stats: Optional[dict[str, Any]] = None  # the stats() report, only when fresh
    watched_s: float = 0.0  # how long this top has watched it (a portal answers the first touch in ~1 s)

    def as_json(self) -> dict[str, Any]:
        return {
            "tag": self.tag,
            "pid": self.pid,
            "run_dir": self.run_dir,
            "state": self.state,
            "age_s": self.age_s,
            **{k: v for k, v in self.info.items() if k not in ("time", "pid", "stats")},
            "stats": self.stats,
        }


def _lock_held(run_dir: str) -> bool:
    """Whether some process holds the portal's lock (a portal being created has none yet: alive too)."""
    try:
        fd = os.open(os.path.join(run_dir, "agent.lock"), os.O_RDONLY)
    except FileNotFoundError:
        return False
    except OSError:
        return True  # not ours to read: leave it to its owner
    try:
        fcntl.lockf(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return False
    except OSError:
        return True
    finally:
        os.close(fd)


def live_portals(base: Optional[str] = None) -> list[tuple[str, int, str]]:
    """``(tag, pid, run_dir)`` of every live portal of this user under ``base`` (the run base dir).

    The lock file is never opened for this process's own portals: closing any descriptor of a
    file drops the caller's record locks on it, which would make its own portals look dead to gc.
    """
    base = base or run_base_dir()
    try:
        entries = sorted(os.listdir(base))
    except OSError:
        return []
    found = []
    uid = os.getuid()
    for entry in entries:
        match = _RUN_DIR.match(entry)
        if not match:
            continue
        path = os.path.join(base, entry)
        try:
            info = os.stat(path)
        except OSError:
            continue
        if not os.path.isdir(path) or (uid != 0 and info.st_uid != uid):
            continue
        pid = int(match["pid"])
        if pid == os.getpid() or (pid_alive(pid) and _lock_held(path)):
            found.append((entry, pid, path))
    return found


def touch_watch(run_dir: str) -> None:
    """Tell a portal it is watched (``publish.WATCH``'s mtime); a portal that is closing is left be.

    The file is made only while the portal's lock file is there, and taken back if the portal
    went meanwhile, so the directory its ``release`` removes is not left with a watch file in it.
    """
    watch = os.path.join(run_dir, WATCH)
    try:
        os.utime(watch)
        return
    except FileNotFoundError:
        pass
    except OSError:
        return
    lock = os.path.join(run_dir, "agent.lock")
    if not os.path.exists(lock):
        return
    try:
        os.close(os.open(watch, os.O_WRONLY | os.O_CREAT, 0o600))
    except OSError:
        return
    if not os.path.exists(lock):
        try:
            os.unlink(watch)
            os.rmdir(run_dir)
        except OSError:
            pass


def read_report(run_dir: str) -> Optional[dict[str, Any]]:
    """The portal's last ``stats.json``, or None where there is none (yet) or it is unreadable."""
    try:
        with open(os.path.join(run_dir, OUT), "rb") as handle:
            data = json.load(handle)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def number(value: Any) -> Optional[float]:
    """A finite number from a report, or None (missing, a string, NaN)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def sparkline(values: "deque[float] | list[float]", width: int = HISTORY) -> str:
    """The last ``width`` values as unicode blocks, scaled to their maximum (all zero: the lowest)."""
    values = list(values)[-width:]
    if not values:
        return ""
    top = max(values)
    if top <= 0:
        return BLOCKS[0] * len(values)
    return "".join(BLOCKS[min(len(BLOCKS) - 1, int(v / top * (len(BLOCKS) - 1) + 0.5))] for v in values)


class Rates:
    """Steps/s between consecutive reports of one portal, per portal, server and env (sparklines).

    A report's rates are averages over its window (10 s); the difference of its step totals
    between two reports a second apart is what the run does now, which is what a sparkline shows.
    """

    def __init__(self) -> None:
        self.last: Optional[tuple[float, float, dict[int, float]]] = None  # (time, total, per env)
        self.portal: deque[float] = deque(maxlen=HISTORY)
        self.envs: dict[int, deque[float]] = {}
        self.servers: dict[int, deque[float]] = {}

    def add(self, when: float, stats: dict[str, Any]) -> None:
        total = number((stats.get("since_start") or {}).get("steps")) or 0.0
        per_env = {}
        for env in stats.get("envs") or []:
            index, steps = env.get("env"), number(env.get("steps"))
            if isinstance(index, int) and steps is not None:
                per_env[index] = steps
        last, self.last = self.last, (when, total, per_env)
        if last is None or when <= last[0]:
            return
        span = when - last[0]
        self.portal.append(max(0.0, (total - last[1]) / span))
        for index, steps in per_env.items():
            rate = max(0.0, (steps - last[2].get(index, steps)) / span)
            self.envs.setdefault(index, deque(maxlen=HISTORY)).append(rate)
        for server in stats.get("servers") or []:
            index = server.get("server")
            if isinstance(index, int):
                rate = sum(self.envs[i][-1] for i in server.get("envs") or [] if i in self.envs and self.envs[i])
                self.servers.setdefault(index, deque(maxlen=HISTORY)).append(rate)


class TopModel:
    """Every live portal of this machine and its last report, with rate histories for sparklines."""

    def __init__(self, base: Optional[str] = None) -> None:
        self.base = base
        self.rates: dict[str, Rates] = {}
        self._seen: dict[str, float] = {}  # tag -> time of the last report taken into its Rates
        self._first: dict[str, float] = {}  # tag -> when this top first touched it (monotonic)

    def touch(self) -> list[tuple[str, int, str]]:
        """Find the live portals and touch their watch files; returns them."""
        portals = live_portals(self.base)
        for tag, _, run_dir in portals:
            touch_watch(run_dir)
            self._first.setdefault(tag, time.monotonic())
        return portals

    def read(self, portals: list[tuple[str, int, str]], now: Optional[float] = None) -> list[PortalView]:
        """The views of ``portals`` from their reports; a fresh report also feeds their sparklines."""
        now = time.time() if now is None else now
        views = []
        for tag, pid, run_dir in portals:
            watched = time.monotonic() - self._first.get(tag, time.monotonic())
            data = read_report(run_dir)
            when = number(data.get("time")) if data else None
            if data is None or when is None or data.get("pid") != pid:
                views.append(PortalView(tag, pid, run_dir, "idle", watched_s=watched))
                continue
            age = max(0.0, now - when)
            stats = data.get("stats") if isinstance(data.get("stats"), dict) else None
            fresh = stats is not None and age <= FRESH_S
            state = "live" if fresh else "idle"
            view = PortalView(tag, pid, run_dir, state, age, data, stats if fresh else None, watched)
            if fresh and stats is not None and self._seen.get(tag) != when:
                self._seen[tag] = when
                self.rates.setdefault(tag, Rates()).add(when, stats)
            views.append(view)
        for tag in set(self.rates) - {view.tag for view in views}:
            del self.rates[tag]  # the portal is gone
            self._seen.pop(tag, None)
        for tag in set(self._first) - {view.tag for view in views}:
            del self._first[tag]
        return views

    def refresh(self) -> list[PortalView]:
        """Touch every live portal and read what they wrote: one refresh of the live view."""
        return self.read(self.touch())

    def snapshot(self, wait_s: float = ONCE_WAIT_S, poll_s: float = 0.1) -> list[PortalView]:
        """One view of every portal, waiting up to ``wait_s`` for fresh reports after the first touch
        (a portal writes only after it notices the watch, within about a second while it steps)."""
        deadline = time.monotonic() + wait_s
        while True:
            portals = self.touch()
            views = self.read(portals)
            if all(view.state == "live" for view in views) or time.monotonic() >= deadline:
                return views
            time.sleep(poll_s)
