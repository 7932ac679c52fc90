"""A hostile env server can make the agent raise or see wrong observations, nothing worse.

Each case starts a real process (``garbage_server.py``) that gets the agent's real config and
breaks the protocol in one way; the agent must raise a ``PortalError`` (never another exception,
never a crash, never a hang) and leave nothing behind.
"""

import fcntl
import os
import subprocess
import sys
import time
from dataclasses import dataclass

import numpy as np
import pytest

import portal_shm
from portal_shm import VectorPortal
from portal_shm.backends import EnvSpec
from portal_shm.runtimes.backend import Backend, ServerHandle, ServerLaunch
from portal_shm.runtimes.process import ProcessHandle
from portal_shm.wire.launch import CONFIG_ENV_VAR, encode_config

pytestmark = pytest.mark.integration

GARBAGE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "garbage_server.py")
REPO = os.path.dirname(os.path.dirname(os.path.dirname(GARBAGE)))


@dataclass(frozen=True)
class GarbageBackend(Backend):
    """Runs ``garbage_server.py MODE`` in place of a real env server."""

    mode: str = "bytes"
    name = "garbage"

    def start(self, launch: ServerLaunch) -> ServerHandle:
        env = dict(os.environ, **{CONFIG_ENV_VAR: encode_config(launch.config)})
        env["PYTHONPATH"] = os.pathsep.join(p for p in (REPO, env.get("PYTHONPATH")) if p)
        with open(launch.log_path, "ab") as log:
            process = subprocess.Popen(
                [sys.executable, GARBAGE, self.mode],
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        return ProcessHandle(process, launch.log_path, sys.executable)


def _portal(mode: str, **kwargs) -> VectorPortal:
    kwargs.setdefault("step_timeout", 5)
    return VectorPortal([EnvSpec("garbage", {}, GarbageBackend(mode))], startup_timeout=10, **kwargs)


def _leftovers(tag: str) -> list:
    return [n for n in os.listdir("/dev/shm") + os.listdir("/tmp") if tag in n]


HANDSHAKE_CASES = {
    "bytes": (portal_shm.errors.ServerProtocolError, "corrupt message|malformed"),
    "not-a-map": (portal_shm.errors.ServerProtocolError, "malformed message"),
    "tuple-bomb": (portal_shm.errors.ServerProtocolError, "corrupt message"),
    "bad-dtype": (portal_shm.errors.ServerProtocolError, "dtype"),
    "huge-box": (portal_shm.errors.ServerProtocolError, "bytes per env"),
    "deep-schema": (portal_shm.errors.ServerProtocolError, "nested too deeply"),
    "negative-n": (portal_shm.errors.ServerProtocolError, "n must be an integer"),
    "huge-n": (portal_shm.errors.ServerProtocolError, "n must be an integer"),
    "wrong-count": (portal_shm.errors.ServerProtocolError, "without valid observation_spaces"),
    "metadata-list": (portal_shm.errors.ServerProtocolError, "metadata"),
    "wrong-protocol": (portal_shm.errors.ProtocolMismatchError, "protocol 999"),
    "silent": (portal_shm.errors.PortalTimeoutError, "no answer to start-up"),
    "error-junk": (portal_shm.EnvError, "an env raised"),
    "bad-ready": (portal_shm.errors.ServerProtocolError, "expected 'ready'"),
}


@pytest.mark.parametrize("mode", sorted(HANDSHAKE_CASES))
def test_garbage_during_the_handshake_is_a_clear_error(mode):
    error, pattern = HANDSHAKE_CASES[mode]
    with pytest.raises(error, match=pattern) as info:
        _portal(mode)
    assert len(str(info.value)) < 200_000  # a server cannot flood the agent's error messages
    tag = f"psm-{os.getpid()}-"
    assert not [n for n in _leftovers(tag) if n.endswith(".ctl")]


RUNTIME_CASES = {
    "reset-bad-results": ("reset", "invalid infos beside the ring"),
    "reset-unknown-cmd": ("reset", "answered reset with 'hello'"),
    "step-info-len": ("step", "invalid infos length"),
    "step-info-corrupt": ("step", "corrupt infos"),
    "step-info-shape": ("step", "unexpected shape"),
    "step-extra-blobs": ("step", "invalid infos beside the ring"),
    "step-status-no-message": ("step", "no answer to step"),
}


@pytest.mark.parametrize("mode", sorted(RUNTIME_CASES))
def test_garbage_after_the_handshake_is_a_clear_error(mode):
    phase, pattern = RUNTIME_CASES[mode]
    envs = _portal(mode)
    tag = envs.tag
    try:
        with pytest.raises(
            portal_shm.errors.ServerProtocolError
            if "no answer" not in pattern
            else portal_shm.errors.PortalTimeoutError,
            match=pattern,
        ):
            envs.reset(seed=0)
            envs.step(np.zeros(1, np.int64))
    finally:
        envs.close()
    assert _leftovers(tag) == []


def test_a_flooding_server_gives_wrong_observations_at_worst():
    envs = _portal("step-flood")
    try:
        envs.reset(seed=0)
        for _ in range(20):
            obs, reward, terminated, truncated, infos = envs.step(np.zeros(1, np.int64))
            assert obs.shape == (1, 3) and obs.dtype == np.float32  # the ring's layout is the agent's
    finally:
        envs.close()


def test_a_server_that_rings_without_finishing_cannot_block_the_agent():
    """Rings are only wake-ups: the status word says when a step is done. A server that rings
    nonstop but never finishes gets the step timeout, while the agent spins or sleeps."""
    for spin_wait in (0.0, 200e-6):
        envs = _portal("step-ring-pending", step_timeout=1, spin_wait=spin_wait)
        try:
            envs.reset(seed=0)
            begin = time.monotonic()
            with pytest.raises(portal_shm.errors.PortalTimeoutError, match="step_timeout"):
                envs.step(np.zeros(1, np.int64))
            assert time.monotonic() - begin < 5
        finally:
            envs.close()


def test_a_server_cannot_resize_or_reseal_the_ring():
    envs = _portal("truncate")
    try:
        seals = fcntl.fcntl(envs._session.ring.fd, fcntl.F_GET_SEALS)
        assert seals & fcntl.F_SEAL_SHRINK and seals & fcntl.F_SEAL_GROW and seals & fcntl.F_SEAL_SEAL
        envs.reset(seed=0)
        for _ in range(20):
            obs, *_ = envs.step(np.zeros(1, np.int64))
            assert np.isnan(obs).all()  # the agent still reads its whole mapping: no SIGBUS
        envs._session.servers[0].check_alive()  # the server found every attempt refused (else exit 9)
    finally:
        envs.close()


def test_a_server_that_closes_its_doorbells_times_out_cleanly():
    envs = _portal("close-bells", step_timeout=1)
    tag = envs.tag
    try:
        with pytest.raises(portal_shm.errors.PortalTimeoutError, match="within 1"):
            envs.reset(seed=0)
    finally:
        envs.close()
    assert _leftovers(tag) == []


def test_a_garbage_server_under_the_restart_policy_uses_up_its_restarts():
    envs = _portal("step-info-corrupt", on_env_failure="restart", max_restarts=2)
    try:
        envs.reset(seed=0)
        with pytest.raises(portal_shm.errors.RestartLimitError, match="corrupt infos"):
            for _ in range(10):
                envs.step(np.zeros(1, np.int64))
    finally:
        envs.close()
