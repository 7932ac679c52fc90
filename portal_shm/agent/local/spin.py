"""How long the agent and its servers spin on the ring before they sleep on a doorbell pipe.

A sleeping process on an idle core of a VM takes tens of microseconds to wake (the hypervisor
halts and resumes the vCPU, and the waker pays an interrupt): more than a whole step of a cheap
env (README "Speed" has the figures of this project's machines). A
waiter that watches the ring for a little while, yielding the core at every turn, hides that
cost when the other side answers quickly. Spinning is not free, though: on a core that another
task needs, the scheduler shares the core fairly, so a spinner takes up to half of it. Hence:

- the agent spins only while a core is idle (``doorbell.cores_idle``), so that servers that step
  keep their cores, and it sleeps otherwise;
- the agent spins only while that has been paying off (``SpinPayoff``): when results come later
  than the budget (an Atari batch takes a millisecond and more), a spin at the start of every wait
  only takes its share of a core from the servers that step, and the agent sleeps at once;
- servers spin for the agent's next command only when they are no more than the cores, for up to
  ``SERVER_SPIN_FACTOR`` x ``spin_wait`` and only while the agent's commands have been coming that
  soon (a ``SpinPayoff`` of their own): an agent that thinks for milliseconds between steps finds
  them asleep, and many servers on few cores never spin. Servers of async batches spin too: a
  server waits for its batch's round trip through the agent while the others step, and a server
  that sleeps makes the agent pay a wake-up for every batch it sends (CartPole-v1 N=32 in batches
  of 16 on 2 cores: 110 k steps/s sleeping, 139 k spinning; Pong and ViZDoom batches unchanged
  within noise).

Spinning relies on stores being seen in program order (the other side writes its words, then
the one the waiter watches): x86 guarantees it, weaker memory models do not, so other machines
never spin and only use the pipes (whose system calls order memory).
"""

from __future__ import annotations

import os
import platform
import time
from typing import Callable

from ...wire.doorbell import spin_until

SPIN_WAIT_SECONDS = 200e-6
WRITING_SPIN_SECONDS = 1e-3  # watching a server that rang early (WRITING) before napping
_NAP = 50e-6
_CHECK_EVERY = 0.05
_ORDERED = ("x86_64", "amd64", "i386", "i686", "x86")


def cores() -> int:
    """Cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def default_spin_wait() -> float:
    """``SPIN_WAIT_SECONDS`` on x86 machines with more than one core, else 0 (spinning on the only
    core would only delay the other side); ``PORTAL_SHM_SPIN_WAIT`` (seconds) overrides it."""
    override = os.environ.get("PORTAL_SHM_SPIN_WAIT")
    if override:
        return max(0.0, float(override))
    if platform.machine().lower() not in _ORDERED or cores() < 2:
        return 0.0
    return SPIN_WAIT_SECONDS


SERVER_SPIN_FACTOR = 4


def server_spin(spin_wait: float, num_servers: int) -> float:
    """How long servers may watch for the agent's next command: ``SERVER_SPIN_FACTOR`` x
    ``spin_wait`` while they fit on the cores, else 0 (a spinning server would take time from
    those that step). Each server spins only while its agent's commands have been coming within
    that (its ``SpinPayoff``): an agent that copies a ViZDoom batch out of the ring answers in
    300-400 us, past ``spin_wait``, and a server asleep by then costs it a wake-up (VizdoomBasic-v1
    N=8 lockstep: 1.08-1.10x spinning for 800 us); one that thinks for milliseconds finds them
    asleep at once."""
    return SERVER_SPIN_FACTOR * spin_wait if num_servers <= cores() else 0.0


def wait_written(written: Callable[[], bool], check: Callable[[], None]) -> None:
    """Wait for a server that rang early (status WRITING, ``CMD_RING_EARLY``) to finish writing:
    it rings no more, so the agent watches the status word, spinning (yielding the core) for
    ``WRITING_SPIN_SECONDS``, then in naps of 50 us for a server the machine keeps from running.
    ``check`` raises for a dead server or a passed deadline (every 50 ms)."""
    if spin_until(written, WRITING_SPIN_SECONDS, only_idle=False):
        return
    check_at = time.monotonic() + _CHECK_EVERY
    while not written():
        time.sleep(_NAP)
        if time.monotonic() >= check_at:
            check()
            check_at = time.monotonic() + _CHECK_EVERY
