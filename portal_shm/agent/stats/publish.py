"""A portal's stats for ``portal-shm top``, written into its run directory while someone watches.

``top`` touches ``WATCH`` in the run directories it shows; a portal whose ``WATCH`` was touched
within ``WATCHED_S`` writes its report (``OUT``, replaced atomically) once a second as it steps.
Nobody watching costs one ``stat`` a second. The run directory is the owner's alone (0700), so
only the owner's user reads it, and a training script needs no change to be watched.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any, Callable

WATCH = "top.watch"
OUT = "stats.json"
WATCHED_S = 5.0


class Publisher:
    def __init__(self, run_dir: str, describe: Callable[[], dict[str, Any]], report: Callable[[], dict[str, Any]]):
        self.watch = os.path.join(run_dir, WATCH)
        self.out = os.path.join(run_dir, OUT)
        self.describe = describe
        self.report = report

    def tick(self) -> None:
        """Write the report when watched (called once a second from the portal's own calls)."""
        try:
            watched = time.time() - os.stat(self.watch).st_mtime <= WATCHED_S
        except OSError:
            return
        if not watched:
            return
        data = {"time": time.time(), "pid": os.getpid(), **self.describe(), "stats": self.report()}
        temporary = f"{self.out}.{os.getpid()}.tmp"
        try:
            with open(temporary, "w") as handle:
                json.dump(data, handle, default=_plain)
            os.replace(temporary, self.out)
        except OSError:
            pass  # the run directory went (the portal is closing): nothing to publish


def _plain(value: Any) -> Any:
    """numpy scalars and other odd values as JSON takes them."""
    if hasattr(value, "item"):
        return value.item()
    return str(value)
