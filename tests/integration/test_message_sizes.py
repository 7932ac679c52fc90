"""Control messages over the cap: the server refuses to send them and names what was too big; the
agent notices a connection its socket dropped and names the server. Never a wait without end.

Real env servers (process backend) under a cap of 1 MiB (the agent hands its cap to each server),
so that no test allocates the 256 MiB of the default one.
"""

import time

import numpy as np
import pytest

import portal_shm
from portal_shm import VectorPortal
from portal_shm.backends import EnvSpec
from portal_shm.wire import protocol as P

pytestmark = pytest.mark.integration

BIG = "portal_shm.server.example_envs:BigInfoEnv"
CAP = 1 << 20
QUICK = 20.0  # seconds: "answered, not waited out" (each case takes well under one here)


@pytest.fixture(autouse=True)
def small_cap(monkeypatch):
    monkeypatch.setattr(P, "MAX_MESSAGE_BYTES", CAP)


def _portal(num_envs: int, info_bytes: int, **kwargs) -> VectorPortal:
    spec = EnvSpec(BIG, {"info_bytes": info_bytes, "unchecked": kwargs.pop("unchecked", False)})
    return VectorPortal([spec] * num_envs, envs_per_server=num_envs, **kwargs)


def _step_error(envs: VectorPortal) -> tuple:
    """(the exception the first step raised, seconds it took)."""
    envs.reset(seed=0)
    start = time.monotonic()
    with pytest.raises(portal_shm.PortalError) as info:
        envs.step(np.zeros(envs.num_envs, np.int64))
    return info.value, time.monotonic() - start


@pytest.mark.timeout(120)
def test_infos_over_the_cap_are_an_env_error_naming_the_env_its_size_and_the_cap():
    envs = _portal(2, info_bytes=2 * CAP)  # default step_timeout: None
    try:
        error, seconds = _step_error(envs)
        assert isinstance(error, portal_shm.errors.MessageTooBigError), error
        assert error.env_index in (0, 1) and error.phase == "step"
        text = str(error)
        assert f"the infos of env {error.env_index} are 2,097," in text
        assert f"{CAP:,}-byte cap" in text and "envs_per_server" in text
        assert seconds < QUICK
        # the server was not broken by it: it serves on
        assert [len(blob) for blob in envs.call("blob", 10)] == [10, 10]
    finally:
        envs.close()


@pytest.mark.timeout(120)
def test_infos_that_fit_one_by_one_but_not_together_name_every_env_and_the_total():
    envs = _portal(4, info_bytes=CAP // 3)  # 4 x 349,525 bytes beside one step
    try:
        error, seconds = _step_error(envs)
        assert isinstance(error, portal_shm.errors.MessageTooBigError), error
        assert "make one message of 1,398," in str(error) and f"{CAP:,}-byte cap" in str(error)
        others = sorted({0, 1, 2, 3} - {error.env_index})
        assert f"and of envs {others[0]}" in str(error)
        assert seconds < QUICK
    finally:
        envs.close()


@pytest.mark.timeout(120)
def test_a_call_whose_reply_is_over_the_cap_names_the_call_its_size_and_the_cap():
    envs = _portal(2, info_bytes=0)
    try:
        envs.reset(seed=0)
        start = time.monotonic()
        with pytest.raises(portal_shm.errors.MessageTooBigError) as info:
            envs.call("blob", CAP)
        assert time.monotonic() - start < QUICK
        text = str(info.value)
        assert "the reply to call('blob') is 2,097," in text and f"{CAP:,}-byte cap" in text
        assert info.value.phase == "call('blob')"
        assert [len(blob) for blob in envs.call("blob", 3)] == [3, 3]  # and the server serves on
    finally:
        envs.close()


@pytest.mark.timeout(120)
def test_the_restart_policy_raises_a_message_too_big_instead_of_restarting_for_it():
    envs = _portal(2, info_bytes=2 * CAP, on_env_failure="restart")
    try:
        error, _ = _step_error(envs)
        assert isinstance(error, portal_shm.errors.MessageTooBigError), error
        assert envs.restart_log == [] and envs.restarts == [0, 0]
    finally:
        envs.close()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("step_timeout", [None, 60.0])
def test_a_message_the_agents_socket_dropped_is_named_not_waited_out(step_timeout):
    """A server that sends past the cap without checking (an older one, or an env that reaches its
    server): the agent's socket drops the message and the connection; the agent names the server,
    and does not blame it for silence."""
    envs = _portal(2, info_bytes=2 * CAP, unchecked=True, step_timeout=step_timeout)
    try:
        error, seconds = _step_error(envs)
        assert isinstance(error, portal_shm.errors.ConnectionDroppedError), error
        assert not isinstance(error, portal_shm.errors.PortalTimeoutError)
        text = str(error)
        assert "env server 0 (envs [0, 1])" in text and "control connection dropped" in text
        assert f"{CAP:,}-byte cap" in text
        assert seconds < QUICK
    finally:
        envs.close()
