"""Whether a local portal can go on: the failures after which it refuses every further call.

Shared by the portal and its drivers (``lockstep.py``, ``batch_driver.py``): whoever meets a
failure reports it here, and the portal checks here before every call. A dead, hung or
misbehaving server leaves the ring in an unknown state, so the portal is broken for good and its
servers are stopped rather than asked to close their envs.
"""

from __future__ import annotations

from typing import NoReturn, Optional

from gymnasium.error import ClosedEnvironmentError

from ...errors import EnvError, PortalError, PortalTimeoutError, RestartLimitError, ServerDiedError, ServerProtocolError
from . import env_fns as F
from .session import PortalSession

_FATAL = (ServerDiedError, PortalTimeoutError, ServerProtocolError, RestartLimitError, KeyboardInterrupt)


class Health:
    """The first fatal failure of one portal (``broken``), and how env errors are raised."""

    def __init__(self, session: PortalSession, gymnasium_form: bool) -> None:
        self.session = session
        self.gymnasium_form = gymnasium_form
        self.broken: Optional[BaseException] = None
        self._recovered: Optional[BaseException] = None

    def recovered(self, exc: BaseException) -> BaseException:
        """``exc`` is raised to the caller, but its server was restarted: the portal goes on."""
        self._recovered = exc
        return exc

    def check_usable(self, closed: bool) -> None:
        if closed:
            raise ClosedEnvironmentError("this VectorPortal is closed")
        if self.broken is not None:
            raise PortalError(f"this VectorPortal cannot continue after an earlier failure: {self.broken}")

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
            F.log_env_errors(errors)
            self.broken = errors[-1]
            raise errors[-1]
        raise errors[0]
