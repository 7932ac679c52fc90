"""The agent keys a host accepts: its clients directory, as libzmq's ZAP handler asks."""

from __future__ import annotations

import logging
import os
from typing import Any

from ...errors import PortalError
from .. import keys

log = logging.getLogger("portal_shm.host")


class ClientKeys:
    """The ZAP check of client keys: the allowed list, reread when the directory or a key file in
    it changes, and a log line for every refusal (libzmq refuses silently).

    The directory is trusted as sshd's StrictModes trusts ``authorized_keys`` (``keys.untrusted``):
    one that others can write, or another user owns, stops the host at start, and while serving
    refuses every key until it is fixed (logged as an error); a key file that fails, or is not a
    regular file, is skipped with a warning naming it and why. A directory where two files hold
    one key (or two names differ only in case) stops the host at start; appearing later, those
    files' keys are refused and each such problem logged as an error.
    """

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self._stamp: Any = self._read_stamp()
        scan = keys.scan_client_keys(directory)  # raises, naming the path and the fix, when untrusted
        if scan.problems:
            raise PortalError("; ".join(scan.problems))
        self._keys = scan.keys
        self._log_skipped(scan.skipped)

    def _read_stamp(self) -> Any:
        """What changes when the directory or any key file in it changes: contents, owner or mode
        (``ctime``), a file added, removed or replaced (a key file's ``chmod`` leaves the
        directory's own times as they were)."""
        try:
            info = os.stat(self.directory)
            with os.scandir(self.directory) as entries:
                files = sorted(
                    (e.name, e.inode(), e.stat(follow_symlinks=False).st_ctime_ns)
                    for e in entries
                    if e.name.endswith(".key")
                )
        except OSError:
            return None
        return (info.st_ino, info.st_mtime_ns, info.st_ctime_ns, tuple(files))

    def _log_skipped(self, skipped: list[str]) -> None:
        for why in skipped:
            log.warning("clients directory: skipped %s", why)

    def allowed(self) -> dict[bytes, str]:
        stamp = self._read_stamp()
        if stamp != self._stamp:
            self._stamp = stamp
            try:
                scan = keys.scan_client_keys(self.directory)
            except PortalError as exc:
                self._keys = {}
                log.error("%s; every client key is refused until then", exc)
                return self._keys
            self._keys = scan.keys
            self._log_skipped(scan.skipped)
            for problem in scan.problems:
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
