"""Where an env server leaves its envs' episode-end states for an exact restart, and in what form.

With ``on_env_failure="restart"`` (lockstep) a server that saw episodes end in a step takes those
envs' states once the step's results are out (off the step's path) and writes them to a file of its
own in the portal's run directory: written there, they outlive a crash right after (a message still
queued in ZeroMQ would die with the process), and the agent reads the file only when the server
failed. The name is derived from the server's start-up token, so a fresh server started in the same
place never leaves a file its predecessor's could be mistaken for; the token itself (a secret that
fetches the ring) is not in the name.
"""

from __future__ import annotations

import hashlib
import os

MAX_STATE_BYTES = 1 << 20  # one env's state; a bigger one is not written (its restart ends the episode)


def end_states_path(run_dir: str, ring_token: str) -> str:
    digest = hashlib.sha256(ring_token.encode()).hexdigest()[:16]
    return os.path.join(run_dir, f"end-states-{digest}")


def max_file_bytes(num_envs: int) -> int:
    """What a reader takes of the file at most: every env's state and its header."""
    return num_envs * (MAX_STATE_BYTES + 256) + 256
