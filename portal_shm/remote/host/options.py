"""What ``portal-shm host`` is started with: the operator's flags as one object."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Optional

from .policy import HostPolicy
from .quotas import Limits

DEFAULT_PORT = 5555
# A step, reset or call of a session's envs that takes longer is a wedged env: its session ends.
DEFAULT_STEP_TIMEOUT = 120.0


@dataclass
class HostOptions:
    """What ``portal-shm host`` is started with; each field is a command-line option."""

    bind: str = f"tcp://127.0.0.1:{DEFAULT_PORT}"
    keys_dir: Optional[str] = None  # the host's own key pair; default ~/.config/portal-shm/host
    clients_dir: Optional[str] = None  # public keys of the agents it serves; default <keys_dir>/clients
    insecure: bool = False
    max_envs: int = Limits.max_envs
    max_envs_per_agent: int = Limits.max_envs_per_agent
    policy: HostPolicy = field(default_factory=HostPolicy)
    heartbeat_timeout: float = 10.0
    step_timeout: float = DEFAULT_STEP_TIMEOUT  # the most an agent's vector_kwargs step_timeout may be
    max_message_bytes: int = Limits.max_message_bytes
    name: str = field(default_factory=lambda: os.uname().nodename)
    max_sessions: int = Limits.max_sessions
    max_sessions_per_agent: int = Limits.max_sessions_per_agent
    max_fds: Optional[int] = None
    max_unacked_bytes: int = Limits.max_unacked_bytes
    max_decoded_bytes: int = Limits.max_decoded_bytes

    def check(self) -> None:
        """The operator's own values that ``Limits`` does not hold (a bad flag stops the host at start)."""
        from ...errors import PortalError

        for name in ("heartbeat_timeout", "step_timeout"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < float("inf"):
                raise PortalError(f"--{name.replace('_', '-')} {value!r}: give a positive number of seconds")

    def limits(self) -> Limits:
        return Limits(**{name: getattr(self, name) for name in Limits.__dataclass_fields__})
