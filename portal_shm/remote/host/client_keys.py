"""The agent keys a host accepts: its clients directory, as libzmq's ZAP handler asks."""

from __future__ import annotations

import logging
import os
from typing import Any

from .. import keys

log = logging.getLogger("portal_shm.host")


class ClientKeys:
    """The ZAP check of client keys: the allowed list, reread when its directory changes, and a log
    line for every refusal (libzmq refuses silently).

    A directory where two files hold one key (or two names differ only in case) stops the host at
    start; appearing later, those files' keys are refused and each such problem logged as an error.
    """

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self._stamp: Any = None
        self._keys: dict[bytes, str] = {}
        keys.client_keys(directory)  # raises, naming the files, when they clash

    def allowed(self) -> dict[bytes, str]:
        try:
            stamp = os.stat(self.directory).st_mtime_ns
        except OSError:
            stamp = None
        if stamp != self._stamp:
            self._stamp, (self._keys, problems) = stamp, keys.scan_client_keys(self.directory)
            for problem in problems:
                log.error("clients directory: %s; those files' keys are refused until then", problem)
        return self._keys

    def callback(self, domain: str, key: bytes) -> bool:
        """``key``: the client's public key in Z85, as pyzmq's authenticator passes it."""
        if key not in self.allowed():
            log.warning(
                "refused a client: its key %s is not among the %d in %s",
                key.decode("ascii", "replace"),
                len(self._keys),
                self.directory,
            )
            return False
        return True
