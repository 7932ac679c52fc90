"""Failure as a policy object: what a portal's drivers ask when an env's runtime fails.

``on_env_failure`` picks one of two policies, and every portal kind builds the one it names
(``agent/local/failure.py``, ``remote/client/failure.py``): ``"raise"`` hands every failure to the
caller, ``"restart"`` repairs it (a fresh server or host session in place of the failed one, its
envs' episodes ended or the step made again) and lets the portal go on. The drivers never test a
flag: they ask the policy whether a failure is its to repair (``handles``), which of a server's
env errors it takes (``step_errors``), and how long they wait (``timeouts``); what each kind's
restart policy then does, and what it owes to whom (fresh envs that reset instead of stepping,
restarts shown once in the infos), is its own state.

``RaisesFailures`` and ``RestartsFailures`` answer those questions once for every kind; each kind's
policy is one of them over its own restart bookkeeping.
"""

from __future__ import annotations

from typing import ClassVar, Optional, Protocol

from ...errors import EnvError, InfoEncodingError, MessageTooBigError

#: Env errors that are no failure of the env's runtime, which a restart would meet again: the
#: caller gets them and the server goes on, under either policy.
NOT_FAILURES = (MessageTooBigError, InfoEncodingError)


def failures(errors: list[EnvError]) -> list[EnvError]:
    """The env errors that the restart policy restarts a server for (``NOT_FAILURES`` left out)."""
    return [error for error in errors if not isinstance(error, NOT_FAILURES)]


def repairing(exc: BaseException) -> BaseException:
    """A failure kept until the policy repairs it, without its traceback: the traceback's frames
    hold every local of the agent's call stack, the caller's last batch among them, in a cycle with
    the exception that only the cyclic GC breaks (a ring slot held that long is a slot the next
    steps cannot use). What is reported of it is its type and message (and its causes')."""
    seen: set[int] = set()
    link: Optional[BaseException] = exc
    while link is not None and id(link) not in seen:
        seen.add(id(link))
        link.__traceback__ = None
        link = link.__cause__ or link.__context__
    return exc


class FailurePolicy(Protocol):
    """What a driver asks when a server (or a host) fails; one of ``RaisesFailures`` and ``RestartsFailures``."""

    #: Whether failures are repaired (a restart, which takes seconds) rather than raised: a driver
    #: that may never wait (an env host's router) leaves a failed step to the one that may.
    repairs: ClassVar[bool]

    def handles(self, exc: BaseException) -> bool:
        """Whether the failure ``exc`` of a server (one of the errors a restart repairs) is this
        policy's to repair: the caller hands the server over instead of raising ``exc``."""
        ...

    def step_errors(self, errors: list[EnvError]) -> list[EnvError]:
        """A server's env errors in a step (or a reset): those the caller reports with the other
        servers'. Raises the first one the policy restarts the server for instead."""
        ...

    def timeouts(self, step_timeout: Optional[float]) -> tuple[Optional[float], Optional[float]]:
        """Async batches: (the default timeout of a wait for the servers as a whole, how long each
        server may step from its ``send`` before it counts as failed)."""
        ...


class RaisesFailures:
    """``on_env_failure="raise"``: every failure is the caller's, raised naming env, runtime and cause."""

    repairs: ClassVar[bool] = False

    def handles(self, exc: BaseException) -> bool:
        return False

    def step_errors(self, errors: list[EnvError]) -> list[EnvError]:
        return errors

    def timeouts(self, step_timeout: Optional[float]) -> tuple[Optional[float], Optional[float]]:
        return step_timeout, None  # a wait past step_timeout raises, whichever server is slow


class RestartsFailures:
    """``on_env_failure="restart"``: a failed server is restarted, its envs' episodes end (or the
    step is made again); env errors in ``NOT_FAILURES`` still go to the caller."""

    repairs: ClassVar[bool] = True

    def handles(self, exc: BaseException) -> bool:
        return not isinstance(exc, NOT_FAILURES)

    def step_errors(self, errors: list[EnvError]) -> list[EnvError]:
        failed = failures(errors)
        if failed:
            raise failed[0]
        return errors

    def timeouts(self, step_timeout: Optional[float]) -> tuple[Optional[float], Optional[float]]:
        return None, step_timeout  # only a server past step_timeout since its own send fails
