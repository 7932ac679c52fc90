"""Whether a local portal can go on: the failures after which it refuses every further call.

Shared by the portal and its drivers (``lockstep.py``, ``batch_driver.py``): whoever meets a
failure reports it here, and the portal checks here before every call. A dead, hung or
misbehaving server leaves the ring in an unknown state, so the portal is broken for good and its
servers are stopped rather than asked to close their envs.
"""

from __future__ import annotations

from typing import Any, Callable, NoReturn, Optional, TypeVar

from gymnasium.error import ClosedEnvironmentError

from ...errors import (
    EnvError,
    InfoEncodingError,
    PortalError,
    PortalTimeoutError,
    RestartLimitError,
    ServerDiedError,
    ServerProtocolError,
)
from .env_fns import log_env_errors
from .session import PortalSession

_FATAL = (ServerDiedError, PortalTimeoutError, ServerProtocolError, RestartLimitError, KeyboardInterrupt)
_T = TypeVar("_T")


class Health:
    """The first fatal failure of one portal (``broken``), and how env errors are raised: the local
    portal's ``PortalHealth`` (``agent/contract/drivers.py``)."""

    def __init__(self, session: PortalSession, gymnasium_form: bool) -> None:
        self.session = session
        self.gymnasium_form = gymnasium_form
        self.broken: Optional[BaseException] = None
        self._recovered: Optional[BaseException] = None
        #: Infos the agent could not decode (``RingViews.refused``), raised once the work is done.
        self._refused: list[InfoEncodingError] = []

    def watch(self, ring: Any) -> None:
        """Raise the infos ``ring`` (a ``RingViews``) refuses after the call that met them."""
        self._refused = ring.refused

    def recovered(self, exc: BaseException) -> BaseException:
        """``exc`` is raised to the caller, but its server was restarted: the portal goes on."""
        self._recovered = exc
        return exc

    def check_usable(self, closed: bool) -> None:
        if closed:
            raise ClosedEnvironmentError("this VectorPortal is closed")
        if self.broken is not None:
            raise PortalError(f"this VectorPortal cannot continue after an earlier failure: {self.broken}")

    def check_waitable(self, closed: bool) -> None:
        """A wait after a failure goes on to report it (the failure of the call in flight is the
        wait's to report)."""
        if closed:
            raise ClosedEnvironmentError("this VectorPortal is closed")

    def run(self, work: Callable[..., _T], *args: Any) -> _T:
        """``work(*args)``; a failure on its way out may break the portal (``fail``). Infos the agent
        could not decode raise once the work is done: the servers' results are all taken, so the
        portal goes on."""
        try:
            result = work(*args)
        except BaseException as exc:
            self.fail(exc)
            raise
        if self._refused:
            first = self._refused[0]
            self._refused.clear()
            raise first
        return result

    def fail(self, exc: BaseException) -> None:
        """Note a failure on its way to the caller: fatal ones break the portal."""
        if isinstance(exc, _FATAL) and exc is not self._recovered:
            self.broken = exc
            self.session.graceful = False

    def raise_env_errors(self, errors: list[EnvError], fatal: bool = True) -> NoReturn:
        """Raise an env's error: the first one, or in the env_fns form the last one after logging all
        as AsyncVectorEnv does (whose failed workers shut down: the portal then refuses further calls).
        ``fatal=False`` (per-env calls, as SB3's): the first one, and the portal goes on."""
        if self.gymnasium_form and fatal:
            log_env_errors(errors)
            self.broken = errors[-1]
            raise errors[-1]
        raise errors[0]
