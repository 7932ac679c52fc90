"""Start-up that says what it is doing: how many env servers (or hosts) are ready, and for how long.

Starting 64 fresh servers took 15 s and 256 remote envs 99 s, in silence. A start that takes
longer than ``QUIET_S`` shows where it is: on a terminal a rich status line on stderr (replaced
in place, gone once the portal is up), elsewhere a line of the ``portal_shm.start`` logger every
``LOG_EVERY_S`` seconds and one at the end. Quick starts print nothing.
"""

from __future__ import annotations

import logging
import sys
import time
from typing import Any, Optional

log = logging.getLogger("portal_shm.start")

QUIET_S = 2.0  # a start quicker than this says nothing
LOG_EVERY_S = 10.0  # off a terminal: one line this often


class StartProgress:
    """Counts ``unit`` ready of ``total`` (``what``: what is starting, for the lines it prints)."""

    def __init__(self, what: str, total: int, unit: str, terminal: Optional[bool] = None) -> None:
        self.what, self.total, self.unit = what, total, unit
        self.ready = 0
        self.began = time.monotonic()
        self.terminal = sys.stderr.isatty() if terminal is None else terminal
        self.status: Any = None
        self.logged = self.began

    def text(self) -> str:
        return f"starting {self.what}: {self.ready}/{self.total} {self.unit} ready ({self.elapsed():.0f} s)"

    def elapsed(self) -> float:
        return time.monotonic() - self.began

    def update(self, ready: Optional[int] = None) -> None:
        """``ready`` of them are ready now (None: one more); show it once the start is slow."""
        self.ready = self.ready + 1 if ready is None else ready
        if self.elapsed() < QUIET_S:
            return
        if self.terminal:
            if self.status is None:
                from rich.console import Console

                self.status = Console(stderr=True).status(self.text())
                self.status.start()
            else:
                self.status.update(self.text())
        elif time.monotonic() - self.logged >= LOG_EVERY_S:
            self.logged = time.monotonic()
            log.info(self.text())

    def close(self) -> None:
        """The start is over (or failed): the status line goes; a slow start logs its time."""
        if self.status is not None:
            self.status.stop()
            self.status = None
        if self.elapsed() >= QUIET_S and self.ready == self.total:
            log.info(f"started {self.what}: {self.total} {self.unit} in {self.elapsed():.1f} s")
