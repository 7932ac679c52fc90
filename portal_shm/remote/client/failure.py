"""A remote portal's two failure policies; ``on_env_failure`` names one (``failure_policy``).

Both are the host restart bookkeeping of ``recovery.py`` (counts and seeds per env) with the
answers of ``agent/contract/failure.py``, as a local portal's are: the exchange and the batches
ask the policy whether a lost host is its to reconnect to, never a flag. Failures inside a host
are the host's local portal's, under the same policy.
"""

from __future__ import annotations

from typing import Any, Callable

from gymnasium.vector import AutoresetMode

from ...agent.contract.failure import RaisesFailures, RestartsFailures
from .hosts import Hosts, RemoteHost
from .recovery import HostRecovery


class HostRaisePolicy(RaisesFailures, HostRecovery):
    """``on_env_failure="raise"``: a lost host raises ``HostLostError``."""


class HostRestartPolicy(RestartsFailures, HostRecovery):
    """``on_env_failure="restart"``: a lost host is reconnected to and its envs' episodes end (``recovery.py``)."""


POLICIES: dict[str, type[HostRecovery]] = {"raise": HostRaisePolicy, "restart": HostRestartPolicy}


def failure_policy(
    name: str,
    hosts: Hosts,
    checked_obs: Callable[[RemoteHost, list[Any], int], list[Any]],
    obs_schema: dict[str, Any],
    autoreset_mode: AutoresetMode,
    max_restarts: int,
    timeout: float,
    heartbeat_timeout: float,
) -> HostRecovery:
    """The policy ``on_env_failure=name`` asks for, over the portal's hosts."""
    return POLICIES[name](hosts, checked_obs, obs_schema, autoreset_mode, max_restarts, timeout, heartbeat_timeout)
