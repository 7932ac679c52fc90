"""What the tenants of a host may make it hold: limits per agent key and per host, checked before
a session is made, and the usage against them that ``stats()`` and ``top`` show.

A host serves agents it does not control. Each thing one of them can make it hold (a session and
its thread, envs, file descriptors, replies kept until acknowledged, the bytes of one message and
what they decode to) has an operator's limit here; a hello past a limit is refused with an error
naming the limit and the ``portal-shm host`` flag that raises it, before anything is started.
"""

from __future__ import annotations

import os
import resource
from dataclasses import dataclass
from typing import Any, Iterable, Optional

from ...agent.contract.grouping import server_count

# Descriptors one session takes on the host, measured (``benchmarks/host_load.py`` samples them):
# its thread's socket and wake pipe, and per env server a control socket, doorbell pipes and a log.
FDS_PER_SESSION = 16
FDS_PER_SERVER = 6
# A message from a sender that holds no session is a hello or a ping: nothing of this size is honest.
MAX_SESSIONLESS_BYTES = 1 << 20


def servers_of(count: int, vector: Any) -> int:
    """The env servers a session of ``count`` envs starts, as its local portal groups them
    (``agent/contract/grouping.py``; values not yet checked count as left out)."""
    vector = vector if isinstance(vector, dict) else {}
    per, batch = vector.get("envs_per_server"), vector.get("batch_size")
    per = per if isinstance(per, int) and not isinstance(per, bool) and per >= 1 else None
    batch = batch if isinstance(batch, int) and not isinstance(batch, bool) and 1 <= batch <= count else None
    return server_count(count, per, batch)


def default_max_fds() -> int:
    """Three quarters of this process's descriptor limit: the rest is the host's own headroom."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return max(64, (soft if soft != resource.RLIM_INFINITY else 1 << 20) * 3 // 4)


def open_fds() -> int:
    try:
        return len(os.listdir("/proc/self/fd"))
    except OSError:
        return 0


@dataclass(frozen=True)
class Limits:
    """The operator's limits; each field is a ``portal-shm host`` flag (``--max-sessions`` ...)."""

    max_sessions: int = 64
    max_sessions_per_agent: int = 16
    max_envs: int = 1024
    max_envs_per_agent: int = 512
    max_fds: Optional[int] = None  # default: default_max_fds()
    max_unacked_bytes: int = 128 << 20
    max_message_bytes: int = 16 << 20
    max_decoded_bytes: int = 64 << 20

    def check(self) -> None:
        """The operator's own values: each a positive int (a bad flag stops the host at start)."""
        from ...errors import PortalError

        for name, value in self.__dict__.items():
            if value is None and name == "max_fds":
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise PortalError(f"--{name.replace('_', '-')} {value!r}: give a positive integer")

    @property
    def fds(self) -> int:
        return self.max_fds if self.max_fds is not None else default_max_fds()

    def describe(self) -> list[str]:
        """The banner's lines: each limit with its flag."""
        return [
            f"  limits      {self.max_sessions} sessions ({self.max_sessions_per_agent} per agent key), "
            f"{self.max_envs} envs ({self.max_envs_per_agent} per agent key), {self.fds} descriptors",
            f"              {_size(self.max_unacked_bytes)} of unacknowledged replies per session, messages of "
            f"{_size(self.max_message_bytes)} decoding to {_size(self.max_decoded_bytes)} at most",
        ]


def _size(count: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if count >= 1 << shift and count % (1 << shift) == 0:
            return f"{count >> shift} {unit}"
    return f"{count:,} bytes"


class Quotas:
    """The limits applied to the sessions the host holds (``sessions``: objects with ``user``,
    ``num_envs``, ``reserved``), and their usage."""

    def __init__(self, limits: Limits, host: str) -> None:
        limits.check()
        self.limits = limits
        self.host = host

    def hello_problem(self, sessions: Iterable[Any], user: str, count: int, vector: Any = None) -> Optional[str]:
        """Why a hello of ``count`` envs from key ``user`` does not fit (None: it fits); ``vector``:
        its vector options, which say how many env servers it takes."""
        live = [s for s in sessions if s.reserved]
        mine = [s for s in live if s.user == user]
        lim = self.limits
        if len(live) + 1 > lim.max_sessions:
            return (
                f"host {self.host} holds {len(live)} sessions, its limit (portal-shm host --max-sessions "
                f"{lim.max_sessions}); try again once one has ended"
            )
        if len(mine) + 1 > lim.max_sessions_per_agent:
            return (
                f"this agent's key holds {len(mine)} sessions on host {self.host}, the per-agent limit "
                f"(portal-shm host --max-sessions-per-agent {lim.max_sessions_per_agent}): close one first"
            )
        total = sum(s.num_envs for s in live)
        if total + count > lim.max_envs:
            return (
                f"host {self.host} runs {total} envs of its limit {lim.max_envs}; {count} more do not fit "
                f"(portal-shm host --max-envs)"
            )
        envs = sum(s.num_envs for s in mine)
        if envs + count > lim.max_envs_per_agent:
            return (
                f"this agent's key already runs {envs} envs on host {self.host}; {count} more pass the per-agent "
                f"limit {lim.max_envs_per_agent} (portal-shm host --max-envs-per-agent)"
            )
        need, used = FDS_PER_SESSION + FDS_PER_SERVER * servers_of(count, vector), open_fds()
        if used + need > lim.fds:
            return (
                f"host {self.host} has {used} file descriptors open of its limit {lim.fds}; a session of {count} "
                f"envs needs about {need} more (portal-shm host --max-fds, within ulimit -n)"
            )
        return None

    def by_key(self, sessions: Iterable[Any], names: dict[bytes, str]) -> dict[str, Any]:
        """Per agent key (by its file name in the clients directory): sessions, envs and the
        unacknowledged bytes of its sessions; what ``top`` shows an operator."""
        out: dict[str, Any] = {}
        for s in sessions:
            if not s.reserved:
                continue
            name = names.get(s.user.encode("ascii", "replace"), s.user[:8] + "..." if s.user else "(insecure)")
            entry = out.setdefault(name, {"sessions": 0, "envs": 0, "unacked_bytes": 0, "refused": 0})
            entry["sessions"] += 1
            entry["envs"] += s.num_envs
            entry["unacked_bytes"] += s.seq.unacked_bytes
            entry["refused"] += s.refused
        return out

    def usage(self, sessions: Iterable[Any], user: str) -> dict[str, Any]:
        """Usage against each limit, for one key and for the host: what ``stats()`` reports."""
        live = [s for s in sessions if s.reserved]
        mine = [s for s in live if s.user == user]
        lim = self.limits
        return {
            "sessions": [len(live), lim.max_sessions],
            "agent_sessions": [len(mine), lim.max_sessions_per_agent],
            "envs": [sum(s.num_envs for s in live), lim.max_envs],
            "agent_envs": [sum(s.num_envs for s in mine), lim.max_envs_per_agent],
            "fds": [open_fds(), lim.fds],
            "unacked_bytes": [max((s.seq.unacked_bytes for s in mine), default=0), lim.max_unacked_bytes],
        }
