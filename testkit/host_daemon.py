"""``python -m portal_shm host`` as an operator starts it, for tests: its arguments as given (no
``--bind`` or keys added, unlike ``HostProcess``), stdout and stderr read apart, line by line, an
environment of the test's choosing (``HOME`` for the default key directories). Started and killed
by ``portal_shm.remote.host.spawn`` as ``HostProcess`` is."""

from __future__ import annotations

import queue
import re
import subprocess
import threading
import time
from typing import Optional

from portal_shm.remote.host.spawn import kill_host, start_host


class HostDaemon:
    """The host process; ``read_until`` waits for a line of its stdout, ``kill`` ends it for sure."""

    def __init__(self, *args: str, env: Optional[dict] = None) -> None:
        self.process = start_host(args, env=env, stderr=subprocess.PIPE)
        self.stdout: queue.Queue = queue.Queue()
        self.stderr: list = []
        threading.Thread(target=self._read, args=(self.process.stdout, self.stdout.put), daemon=True).start()
        threading.Thread(target=self._read, args=(self.process.stderr, self.stderr.append), daemon=True).start()

    @staticmethod
    def _read(stream, put) -> None:
        for line in stream:
            put(line)
        put(None)

    def read_until(self, pattern: str, seconds: float) -> str:
        """Stdout up to and including the first line that matches ``pattern`` (AssertionError if none)."""
        seen, deadline = [], time.monotonic() + seconds
        while time.monotonic() < deadline:
            try:
                line = self.stdout.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                break
            if line is None:
                break
            seen.append(line)
            if re.search(pattern, line):
                return "".join(seen)
        raise AssertionError(
            f"no line matching {pattern!r} on the host's stdout:\n{''.join(seen)}\nstderr:\n{''.join(filter(None, self.stderr))}"
        )

    def banner(self, seconds: float = 60) -> tuple[str, str]:
        """(the start-up banner, the address it serves at)."""
        text = self.read_until(r"agents may run:", seconds)
        return text, re.search(r"portal-shm host \S+ at (tcp://127\.0\.0\.1:\d+)", text).group(1)

    def kill(self) -> None:
        """SIGKILL, then free what the host could not (its run directories), as ``portal-shm gc`` would."""
        if self.process.poll() is None:
            kill_host(self.process)
