"""Failure as a policy object (``agent/contract/failure.py``): what each policy answers the drivers,
and that every portal kind builds the policy ``on_env_failure`` names."""

from pathlib import Path

import pytest

from portal_shm.agent.contract.failure import NOT_FAILURES, RaisesFailures, RestartsFailures, failures
from portal_shm.agent.contract.options import POLICIES
from portal_shm.agent.local import failure as local_failure
from portal_shm.agent.local.recovery import Recovery
from portal_shm.agent.local.recovery import failures as old_failures
from portal_shm.errors import (
    EnvError,
    InfoEncodingError,
    MessageTooBigError,
    PortalTimeoutError,
    ServerProtocolError,
)
from portal_shm.remote.client import failure as remote_failure
from portal_shm.remote.client.recovery import HostRecovery

PACKAGE = Path(__file__).resolve().parents[3] / "portal_shm"


def _env_error(index=0):
    return EnvError(index, "step", "ValueError", "boom", "")


def _too_big(index=0):
    return MessageTooBigError(index, "step", "MessageTooBigError", "too big", "")


def _unencodable(index=0):
    return InfoEncodingError(index, "step", "infos['x']", "an object", "send plain data instead", "unpickle")


def test_raise_policy_hands_every_failure_to_the_caller():
    policy = RaisesFailures()
    assert policy.repairs is False
    for exc in (_env_error(), _too_big(), ServerProtocolError("x"), PortalTimeoutError("x")):
        assert not policy.handles(exc)
    errors = [_env_error(0), _env_error(1)]
    assert policy.step_errors(errors) is errors
    assert policy.timeouts(2.5) == (2.5, None)  # the wait as a whole raises past step_timeout


def test_restart_policy_repairs_failures_but_not_what_a_restart_would_meet_again():
    policy = RestartsFailures()
    assert policy.repairs is True
    assert policy.handles(_env_error()) and policy.handles(ServerProtocolError("x"))
    assert not policy.handles(_too_big()) and not policy.handles(_unencodable())
    kept = [_too_big(0), _unencodable(1)]
    assert policy.step_errors(kept) == kept  # the caller gets them, the server goes on
    first = _env_error(2)
    with pytest.raises(EnvError) as raised:
        policy.step_errors([_too_big(0), first, _env_error(3)])
    assert raised.value is first
    assert policy.timeouts(2.5) == (None, 2.5)  # each server from its own send


def test_failures_leave_out_the_errors_that_are_never_restarts():
    errors = [_too_big(), _env_error(), _unencodable()]
    assert failures(errors) == [errors[1]]
    assert old_failures is failures and set(NOT_FAILURES) == {MessageTooBigError, InfoEncodingError}


@pytest.mark.parametrize(
    "module, bookkeeping", [(local_failure, Recovery), (remote_failure, HostRecovery)], ids=["local", "remote"]
)
def test_every_kind_builds_the_policy_on_env_failure_names(module, bookkeeping):
    assert set(module.POLICIES) == set(POLICIES)
    answers = {"raise": RaisesFailures, "restart": RestartsFailures}
    for name, cls in module.POLICIES.items():
        assert issubclass(cls, answers[name]) and issubclass(cls, bookkeeping)


def test_no_driver_asks_a_flag():
    """The drivers ask the policy (``handles``, ``step_errors``, ``timeouts``), never ``enabled``."""
    asked = [
        f"{path.relative_to(PACKAGE)}:{number}"
        for path in sorted((PACKAGE / "agent").rglob("*.py")) + sorted((PACKAGE / "remote").rglob("*.py"))
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if "recovery.enabled" in line or "self.enabled = policy" in line
    ]
    assert asked == []
