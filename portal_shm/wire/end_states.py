"""Where an env server leaves its envs' episode-end states for an exact restart, and in what form.

With ``on_env_failure="restart"`` (lockstep) a server that saw episodes end in a step takes those
envs' states once the step's results are out (off the step's path) and writes them to a file of its
own in the portal's run directory: written there, they outlive a crash right after (a message still
queued in ZeroMQ would die with the process), and the agent reads the file only when the server
failed. The name is derived from the server's start-up token, so a fresh server started in the same
place never leaves a file its predecessor's could be mistaken for; the token itself (a secret that
fetches the ring) is not in the name.

The file is kept open and rewritten in place by one ``pwrite`` (creating and renaming a file per
episode end cost more than the rest of a CartPole step): 8 bytes of length, then the msgpack
payload; older, longer contents may follow and are ignored. A crash between two writes leaves the
last complete one.
"""

from __future__ import annotations

import hashlib
import os
import struct
from typing import Optional

MAX_STATE_BYTES = 1 << 20  # one env's state; a bigger one is not written (its restart ends the episode)


def end_states_path(run_dir: str, ring_token: str) -> str:
    digest = hashlib.sha256(ring_token.encode()).hexdigest()[:16]
    return os.path.join(run_dir, f"end-states-{digest}")


def max_file_bytes(num_envs: int) -> int:
    """What a reader takes of the file at most: every env's state and its header."""
    return num_envs * (MAX_STATE_BYTES + 256) + 256


_LENGTH = struct.Struct("<Q")


def write_record(fd: int, payload: bytes) -> None:
    os.pwrite(fd, _LENGTH.pack(len(payload)) + payload, 0)


def read_record(path: str, limit: int) -> Optional[bytes]:
    """The last record written to ``path`` (at most ``limit`` bytes), None if there is none."""
    try:
        with open(path, "rb") as handle:
            data = handle.read(_LENGTH.size + limit)
    except OSError:
        return None
    if len(data) < _LENGTH.size:
        return None
    (size,) = _LENGTH.unpack_from(data)
    if size > limit or _LENGTH.size + size > len(data):
        return None
    return data[_LENGTH.size : _LENGTH.size + size]
