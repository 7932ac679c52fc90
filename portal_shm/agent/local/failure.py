"""The local portal's two failure policies; ``on_env_failure`` names one (``failure_policy``).

Both are the restart bookkeeping of ``recovery.py`` (counts, seeds, what fresh servers owe: a
recycled server's fresh one that fails is restarted in place under either) with the answers of
``agent/contract/failure.py``: the drivers ask the policy, and ``RestartPolicy`` alone is ever
handed a failed server to restart (its envs' episodes end, or the step is made again).
"""

from __future__ import annotations

from typing import Optional

from gymnasium.vector import AutoresetMode

from ..contract.failure import RaisesFailures, RestartsFailures
from .recovery import Recovery
from .ring_views import RingViews
from .session import PortalSession


class RaisePolicy(RaisesFailures, Recovery):
    """``on_env_failure="raise"``: every failure raises, naming env, runtime and cause."""


class RestartPolicy(RestartsFailures, Recovery):
    """``on_env_failure="restart"``: a failed server is restarted and the portal goes on (``recovery.py``)."""


POLICIES: dict[str, type[Recovery]] = {"raise": RaisePolicy, "restart": RestartPolicy}


def failure_policy(
    name: str,
    session: PortalSession,
    ring: RingViews,
    autoreset_mode: AutoresetMode,
    step_timeout: Optional[float],
    max_restarts: int,
    startup_timeout: float,
) -> Recovery:
    """The policy ``on_env_failure=name`` asks for, over the portal's session and ring."""
    return POLICIES[name](session, ring, autoreset_mode, step_timeout, max_restarts, startup_timeout)
