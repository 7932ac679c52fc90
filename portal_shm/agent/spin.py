"""How long the agent and its servers spin on the ring before they sleep on a doorbell pipe.

A sleeping process on an idle core of a VM takes 20-40 us to wake (the hypervisor halts and
resumes the vCPU): more than a whole step of a cheap env. Spinning a little while, yielding the
core at every turn, hides that cost when the other side answers quickly and costs an idle core
its idle time otherwise; past the budget the waiter sleeps, so an agent that thinks for
milliseconds between steps does not keep its servers busy.

Spinning relies on stores being seen in program order (the other side writes its words, then
the one the waiter watches): x86 guarantees it, weaker memory models do not, so other machines
never spin and only use the pipes (whose system calls order memory).
"""

from __future__ import annotations

import os
import platform

SPIN_WAIT_SECONDS = 100e-6
_ORDERED = ("x86_64", "amd64", "i386", "i686", "x86")


def default_spin_wait() -> float:
    """``SPIN_WAIT_SECONDS`` on x86 machines with more than one core (else 0: spinning on the only
    core would only delay the other side); ``PORTAL_SHM_SPIN_WAIT`` (seconds) overrides it."""
    override = os.environ.get("PORTAL_SHM_SPIN_WAIT")
    if override:
        return max(0.0, float(override))
    if platform.machine().lower() not in _ORDERED or (os.cpu_count() or 1) < 2:
        return 0.0
    return SPIN_WAIT_SECONDS
