"""The faults a chaos soak injects, when, and how each is timed until its envs step well again.

A fault is injected at a seeded random time into one portal ("lane") that can take it:

- ``sigkill``: SIGKILL one env server (between steps, or ~0.2 ms into a step);
- ``sigstop``: SIGSTOP one env server, which the portal finds past ``step_timeout`` and restarts;
  half of them get a SIGCONT later, the others are left for the restart to kill;
- ``host_restart``: SIGKILL a ``portal-shm host`` process (its env servers clean up after it), and
  start a fresh one on the same port after a short downtime;
- ``link_cut``: cut the emulated link between agent and host for a second (no step may be lost).

Recovery time runs from injection to the first step, begun after it, in which every affected env
returned a transition matching its reference; for faults that must restart the envs, only after
the restart's truncation was seen.
"""

from __future__ import annotations

import os
import signal
import threading
from dataclasses import dataclass, field
from typing import Optional

import numpy as np

SIGKILL, SIGSTOP, HOST_RESTART, LINK_CUT = "sigkill", "sigstop", "host_restart", "link_cut"
KINDS = (SIGKILL, SIGSTOP, HOST_RESTART, LINK_CUT)
RESTARTING = {SIGKILL: True, SIGSTOP: True, HOST_RESTART: True, LINK_CUT: False}


@dataclass
class Fault:
    """One injected fault and what it is waiting for."""

    kind: str
    lane: str
    envs: tuple
    injected: float  # time.monotonic()
    detail: str = ""
    pending: set = field(default_factory=set)  # affected envs that have not stepped well since
    restarted: set = field(default_factory=set)  # affected envs whose restart truncation was seen
    recovery_s: Optional[float] = None

    def __post_init__(self) -> None:
        self.pending = set(self.envs)

    def observe(self, i: int, good: bool, restarted: bool, began: float, ended: float) -> bool:
        """Env ``i``'s transition of a step ``[began, ended]``; True once the fault is recovered."""
        if i not in self.pending:
            return self.recovery_s is not None
        if restarted:
            self.restarted.add(i)
        elif good and began >= self.injected and (i in self.restarted or not RESTARTING[self.kind]):
            self.pending.discard(i)
            if not self.pending:
                self.recovery_s = ended - self.injected
        return self.recovery_s is not None


def schedule(seed: int, kinds: tuple, mean_interval: float, seconds: float) -> list:
    """``[(seconds from start, kind)]``: exponential gaps; every kind once first, in a seeded order,
    so that even a short run injects each kind."""
    rng = np.random.default_rng(seed)
    order = list(rng.permutation(kinds))
    at, out = 0.0, []
    while True:
        at += float(rng.exponential(mean_interval))
        if at >= seconds:
            return out
        out.append((at, str(order.pop(0)) if order else str(rng.choice(kinds))))


def signal_server(pid: int, sig: int, mid_step: bool) -> Optional[threading.Timer]:
    """Signal ``pid`` now, or from a timer ~0.2 ms from now (most likely inside the step the caller
    is about to make); returns the timer to join."""
    if not mid_step:
        _kill(pid, sig)
        return None
    timer = threading.Timer(0.0002, _kill, (pid, sig))
    timer.start()
    return timer


def resume_later(pid: int, seconds: float) -> threading.Timer:
    """SIGCONT ``pid`` after ``seconds`` (after the portal has given up on it and restarted it)."""
    timer = threading.Timer(seconds, _kill, (pid, signal.SIGCONT))
    timer.daemon = True
    timer.start()
    return timer


def _kill(pid: int, sig: int) -> None:
    """``sig`` to ``pid`` and, for SIGSTOP and SIGCONT, to its descendants: a container's host pid
    is its init, and stopping that alone leaves the env server in it running (SIGKILL of a
    container's init ends the container)."""
    pids = [pid] + (_descendants(pid) if sig in (signal.SIGSTOP, signal.SIGCONT) else [])
    for target in pids:
        try:
            os.kill(target, sig)
        except ProcessLookupError:  # already gone: the restart killed it
            pass


def _descendants(pid: int) -> list:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as handle:
            children = [int(child) for child in handle.read().split()]
    except OSError:
        return []
    return children + [grandchild for child in children for grandchild in _descendants(child)]


def percentiles(values: list) -> dict:
    if not values:
        return {"p50": None, "max": None}
    return {"p50": round(float(np.median(values)), 3), "max": round(float(max(values)), 3)}
