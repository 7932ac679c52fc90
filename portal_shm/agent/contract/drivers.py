"""What each portal kind hands the contract: its drivers, in one vocabulary.

``PortalVectorEnv`` (``base.py``) checks every call and keeps the async protocol; the work itself
is done by parts each kind composes: a lockstep driver (every env at once), a batch driver
(envpool's async batches, where the portal has them), a call driver (per-env requests to the
envs' owners) and the portal's health (whether it may go on, and what a failure on its way out
does to it). A local ``VectorPortal`` drives env servers over its ring, a ``RemoteVectorPortal``
drives env hosts over the network; both implement these protocols, so the contract calls the
drivers directly and no kind forwards them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Protocol, TypeVar

import numpy as np

StepResult = tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]
ResetResult = tuple[Any, dict[str, Any]]

_T = TypeVar("_T")


@dataclass(frozen=True)
class Request:
    """One owner's share of a per-env call: the op, the envs it names (the portal's indices, in the
    order their values come back; None: all of the owner's envs) and its fields (``name``, ``args``,
    ``kwargs``, ``values``: one per env named, ``allow_pickle``, ``on``)."""

    op: str
    envs: Optional[list[int]]
    fields: dict[str, Any] = field(default_factory=dict)


class LockstepDriver(Protocol):
    """Steps, resets and restores every env at once; each start returns at once, its result waits."""

    def reset(self, seeds: list[Optional[int]], options: Optional[dict[str, Any]], mask: Optional[np.ndarray]) -> None:
        """Start the reset of every env (of ``mask``'s envs only, when given)."""

    def reset_result(self, timeout: Optional[float]) -> ResetResult:
        """The observations and infos of the reset ``reset`` started."""

    def step(self, actions: Any) -> None:
        """Start a step of every env."""

    def step_result(self, timeout: Optional[float]) -> StepResult:
        """The results of the step ``step`` started."""

    def restore(self, states: dict[int, bytes], allow_pickle: bool) -> ResetResult:
        """Restore each env's state (env index -> state): every env's observation, the restored
        envs' infos."""


class BatchDriver(Protocol):
    """envpool's async batches: envs step in groups, the first ``batch_size`` to finish come back."""

    def reset(self, seeds: list[Optional[int]], options: Optional[dict[str, Any]]) -> None:
        """Reset every env; ``recv`` hands out the batches."""

    def send(self, actions: Any, env_ids: Any) -> None:
        """Step ``env_ids`` (None: the last ``recv``'s) and return at once."""

    def recv(self, timeout: Optional[float]) -> StepResult:
        """The next batch to finish."""


class CallDriver(Protocol):
    """Per-env requests to the envs' owners (env servers, env hosts, Ray-placed hosts)."""

    def owners(self) -> list[list[int]]:
        """Each owner's envs (ascending env indices), owners in env order."""

    def post(self, requests: dict[int, Request], what: str) -> None:
        """Send each owner named its request (owner index -> request) and return at once; raises
        ``TypeError`` naming an unsendable value before any owner is told."""

    def collect(self, what: str, timeout: Optional[float]) -> list[Any]:
        """The values of the posted requests, one per env each named, owners ascending (nothing
        for ops whose replies carry no values); an owner's error raised as the agent's own exception."""


class PortalHealth(Protocol):
    """Whether the portal may go on, and what a failure on its way to the caller does to it."""

    def check_usable(self, closed: bool) -> None:
        """Raise ``ClosedEnvironmentError`` after ``close()``, ``PortalError`` after a failure that
        left the envs mid-call."""

    def check_waitable(self, closed: bool) -> None:
        """What a ``*_wait`` checks before it takes its results."""

    def run(self, work: Callable[..., _T], *args: Any) -> _T:
        """``work(*args)``, a failure on its way out noted (a fatal one breaks the portal)."""


class Clock(Protocol):
    """The agent's time inside the portal and away from it (``stats``): entered as a call starts,
    left as its results go back."""

    def enter(self) -> None: ...

    def leave(self) -> None: ...
