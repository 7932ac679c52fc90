"""Small envs shipped with portal-shm for benchmarks, smoke tests and the test suite.

Use them by entry point, e.g. ``make_vec("portal_shm.server.example_envs:NullEnv", 8, shape=(84, 84, 4))``
(the name tests, docs, images and hosts' ``--entry-points 'portal_shm.server.example_envs:*'`` use;
``portal_shm.example_envs:NullEnv`` names the same class). They run inside env runtimes, so they need
gymnasium there; the env server itself never imports them (import-linter says so).

By what they are for:

- ``plain``: well-behaved envs (``NullEnv``, ``SlowEnv``, ``NestedEnv``, ``RandomWalkEnv``, ...);
- ``faulty``: envs that fail or decay on purpose (``FaultyEnv``, ``LeakyEnv`` and its kin);
- ``multi_agent``: PettingZoo-shaped envs without PettingZoo (``LeavingAgentsEnv``, ``MatchingPenniesEnv``);
- ``hostile``: envs that attack their server or the agent (``DoorbellStormEnv``, ``WedgingEnv``, ...);
- ``info_kinds``: infos of every kind a runtime may carry (``InfoKindsEnv``, ``INFO_KINDS``).
"""

from __future__ import annotations

from .faulty import DyingRestoreEnv, FaultyEnv, LeakyEnv, SlowingEnv, ThreadingEnv
from .hostile import BigInfoEnv, ClashingInfosEnv, DoorbellStormEnv, HugeSpaceEnv, WedgingEnv
from .info_kinds import INFO_KINDS, InfoKindsEnv, InfoPoint, InfoStats, InfoStatus, info_value
from .multi_agent import LeavingAgentsEnv, MatchingPenniesEnv, named_agents_env
from .plain import LegacyCounterEnv, NestedEnv, NullEnv, PayloadEnv, RandomWalkEnv, SlowEnv, TextObsEnv

__all__ = [
    "INFO_KINDS",
    "BigInfoEnv",
    "ClashingInfosEnv",
    "DoorbellStormEnv",
    "DyingRestoreEnv",
    "FaultyEnv",
    "HugeSpaceEnv",
    "InfoKindsEnv",
    "InfoPoint",
    "InfoStats",
    "InfoStatus",
    "LeakyEnv",
    "LeavingAgentsEnv",
    "LegacyCounterEnv",
    "MatchingPenniesEnv",
    "NestedEnv",
    "NullEnv",
    "PayloadEnv",
    "RandomWalkEnv",
    "SlowEnv",
    "SlowingEnv",
    "TextObsEnv",
    "ThreadingEnv",
    "WedgingEnv",
    "info_value",
    "named_agents_env",
]
