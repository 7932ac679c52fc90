"""A host's run directory: where ``portal-shm top`` finds the host and reads its usage.

A host's sessions have run directories of their own (their local portals'); this one holds the
host's lock and its report, written once a second while ``top`` watches. A host killed before it
could remove it leaves it behind: the next host on the machine frees those of dead hosts first.
"""

from __future__ import annotations

import os
from typing import Any, Callable

from ...agent.stats.publish import Publisher
from ...runtimes.resources import PortalResources

HOST_MARK = "env-host"  # in a host's run directory: the run directories a host frees at start


class HostRunDir:
    def __init__(self, describe: Callable[[], dict[str, Any]], report: Callable[[], dict[str, Any]]) -> None:
        free_dead_hosts()
        self._resources = PortalResources()
        with open(os.path.join(self._resources.run_dir, HOST_MARK), "w"):
            pass
        self._publisher = Publisher(self._resources.run_dir, describe, report)
        self._published_at = 0.0

    def tick(self, now: float) -> None:
        """The report, at most once a second (``now``: monotonic seconds), when watched."""
        if now >= self._published_at + 1.0:
            self._published_at = now
            self._publisher.tick()

    def release(self) -> None:
        self._resources.release()


def free_dead_hosts() -> None:
    """Remove the run directories of hosts that died without removing them."""
    from ...runtimes import gc as leftovers

    for leftover in leftovers.find_leftovers():
        if leftover.kind == "run dir" and os.path.exists(os.path.join(leftover.name, HOST_MARK)):
            try:
                leftovers.remove(leftover)
            except OSError:
                pass
