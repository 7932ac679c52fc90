"""Faults inside env runtimes surface as clear agent-side errors, quickly, and leave nothing behind."""

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

import portal_shm
from portal_shm import VectorPortal
from portal_shm.backends import EnvSpec

pytestmark = pytest.mark.integration

FAULTY = "portal_shm.server.example_envs:FaultyEnv"


def leftovers(tag_prefix: str = "psm-") -> list:
    shm = [name for name in os.listdir("/dev/shm") if tag_prefix in name]
    run_dirs = [name for name in os.listdir("/tmp") if name.startswith(tag_prefix)]
    return shm + run_dirs


def _pid_gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def faulty_pair(**fault):
    """Env 0 healthy, env 1 faulty: two servers, so the error must name env 1."""
    return VectorPortal([EnvSpec(FAULTY, {"fault": "none"}), EnvSpec(FAULTY, fault)], step_timeout=20)


def _server_pids(envs) -> list:
    return [int(s["runtime"].split()[2].rstrip(",")) for s in envs.servers]


def test_exception_in_step_names_env_and_carries_traceback():
    envs = faulty_pair(fault="raise", phase="step", after=2)
    try:
        envs.reset(seed=0)
        envs.step(np.zeros(2, np.int64))
        with pytest.raises(portal_shm.EnvError) as info:
            envs.step(np.zeros(2, np.int64))
        assert info.value.env_index == 1
        assert "FaultyEnv failed in step on purpose" in str(info.value)
        assert "_maybe_fail" in info.value.remote_traceback
        assert info.value.phase == "step"
    finally:
        envs.close()


@pytest.mark.parametrize("phase", ["reset", "render", "close"])
def test_exception_in_other_phases(phase):
    envs = faulty_pair(fault="raise", phase=phase)
    try:
        if phase == "close":  # (call("close") is refused, as AsyncVectorEnv refuses it: close() must cope)
            envs.reset(seed=0)
        else:
            with pytest.raises(portal_shm.EnvError, match=f"env 1 raised ValueError in {phase}"):
                envs.reset(seed=0) if phase == "reset" else envs.render()
    except portal_shm.EnvError as exc:
        assert phase == "close" and exc.env_index == 1
    finally:
        envs.close()
    assert envs.closed


def test_exception_in_call_is_reported_and_portal_keeps_working():
    envs = portal_shm.make_vec("CartPole-v1", 2)
    try:
        envs.reset(seed=0)
        with pytest.raises(portal_shm.EnvError, match="no_such_method"):
            envs.call("no_such_method")
        envs.step(np.zeros(2, np.int64))
    finally:
        envs.close()


@pytest.mark.parametrize("fault,status", [("segfault", "SIGSEGV"), ("exit", "exit code 7")])
def test_dying_server_is_reported_with_exit_status(fault, status):
    envs = faulty_pair(fault=fault, phase="step", after=1)
    try:
        envs.reset(seed=0)
        started = time.monotonic()
        with pytest.raises(portal_shm.errors.ServerDiedError, match=status) as info:
            envs.step(np.zeros(2, np.int64))
        assert time.monotonic() - started < 5
        assert info.value.env_indices == [1]
        with pytest.raises(portal_shm.PortalError, match="cannot continue"):
            envs.step(np.zeros(2, np.int64))
    finally:
        envs.close()


def test_sigkilled_server_is_reported():
    envs = portal_shm.make_vec("CartPole-v1", 2, vector_kwargs={"envs_per_server": 1})
    try:
        envs.reset(seed=0)
        os.kill(_server_pids(envs)[1], signal.SIGKILL)
        with pytest.raises(portal_shm.errors.ServerDiedError, match="SIGKILL"):
            for _ in range(100):
                envs.step(np.zeros(2, np.int64))
    finally:
        envs.close()


@pytest.mark.parametrize("fault", ["hang", "spin", "stop"])
def test_hanging_server_times_out(fault):
    """A server asleep, in an endless loop or SIGSTOPped: step_timeout bounds the wait."""
    envs = VectorPortal(
        [EnvSpec(FAULTY, {"fault": "none"}), EnvSpec(FAULTY, {"fault": fault, "phase": "step", "after": 1})],
        step_timeout=0.5,
    )
    tag = envs.tag
    try:
        envs.reset(seed=0)
        started = time.monotonic()
        with pytest.raises(
            portal_shm.errors.PortalTimeoutError, match=r"env server 1 \(envs \[1\]\) \[runtime: process pid"
        ) as info:
            envs.step(np.zeros(2, np.int64))
        assert time.monotonic() - started < 10  # an upper bound for a hang, not a timing claim
        assert "step_timeout" in str(info.value)
        pids = _server_pids(envs)
    finally:
        envs.close()
    assert all(_pid_gone(pid) for pid in pids)
    assert not [name for name in leftovers() if tag in name]


@pytest.mark.parametrize("phase", ["reset", "call"])
def test_step_timeout_bounds_control_calls_too(phase):
    envs = VectorPortal(
        [EnvSpec(FAULTY, {"fault": "spin", "phase": "reset" if phase == "reset" else "render"})], step_timeout=0.5
    )
    try:
        with pytest.raises(portal_shm.errors.PortalTimeoutError, match=r"envs \[0\]"):
            envs.reset(seed=0) if phase == "reset" else envs.render()
    finally:
        envs.close()


def test_env_raising_in_close_does_not_delay_close():
    envs = faulty_pair(fault="raise", phase="close")
    tag = envs.tag
    pids = _server_pids(envs)
    envs.reset(seed=0)
    envs.close()  # the env's exception is not the caller's problem at close; nothing stays behind
    _wait_until_clean(tag, pids, 3)


def test_the_run_directory_goes_before_the_servers_finish_closing():
    """An agent killed while ``close()`` waits for its servers leaves nothing to collect: the run
    directory is removed as soon as the servers are told to close, not after they exit."""
    envs = VectorPortal([EnvSpec(FAULTY, {"fault": "slow", "phase": "close"})])
    tag, pids = envs.tag, _server_pids(envs)
    closing = threading.Thread(target=envs.close)
    closing.start()
    try:
        deadline = time.monotonic() + 1.5
        while any(tag in name for name in leftovers()) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert not [name for name in leftovers() if tag in name]
        assert not _pid_gone(pids[0])  # still inside its env's two-second close
    finally:
        closing.join()
    assert _pid_gone(pids[0])


def test_unknown_env_id_fails_fast_naming_the_id():
    started = time.monotonic()
    with pytest.raises(portal_shm.errors.EnvNotFoundError, match="NoSuchEnv-v0"):
        portal_shm.make_vec("NoSuchEnv-v0", 2)
    with pytest.raises(portal_shm.errors.EnvNotFoundError, match="no_such_module"):
        portal_shm.make_vec("no_such_module:make", 1)
    assert time.monotonic() - started < 30


def test_close_removes_segments_sockets_and_processes():
    envs = portal_shm.make_vec("CartPole-v1", 3)
    tag = envs.tag
    pids = _server_pids(envs)
    assert any(tag in name for name in leftovers())
    envs.reset(seed=0)
    obs, *_ = envs.step(np.zeros(3, np.int64))
    envs.close()
    assert not [name for name in leftovers() if tag in name]
    assert all(_pid_gone(pid) for pid in pids)
    assert obs.shape == (3, 4)  # a batch still held stays readable after close, never a crash


AGENT = textwrap.dedent("""
    import sys, time, numpy as np, portal_shm
    from portal_shm import VectorPortal
    from portal_shm.backends import EnvSpec
    fault = {"spin": "spin", "closing": "slow"}.get(sys.argv[1], "hang")
    phase = {"spin": "step", "closing": "close"}.get(sys.argv[1], sys.argv[1])
    envs = VectorPortal([EnvSpec("portal_shm.server.example_envs:FaultyEnv", {"fault": fault, "phase": phase})])
    print(envs.tag, " ".join(s["runtime"].split()[2].rstrip(",") for s in envs.servers), flush=True)
    if phase == "close":  # its server takes 2 s to close its env: the agent is killed while it waits
        print("closing", flush=True)
        envs.close()
    elif phase == "step":
        envs.reset(seed=0)
        print("stepping", flush=True)
        envs.step(np.zeros(1, np.int64))
    elif sys.argv[1] == "reset":
        print("resetting", flush=True)
        envs.reset(seed=0)
    else:
        if sys.argv[1] == "idle-forked":
            import os
            if os.fork() == 0:  # a forked worker must not keep its dead parent's portal alive
                time.sleep(8)
                os._exit(0)
        print("idle", flush=True)
        time.sleep(600)
""")


def _as_in_a_terminal() -> None:
    """SIGINT as an interactive shell leaves it: a CI runner, nohup or a job started with ``&`` ignore
    it, and Python then installs no KeyboardInterrupt handler in the agent at all."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _start_agent(mode: str) -> tuple:
    process = subprocess.Popen(
        [sys.executable, "-c", AGENT, mode], stdout=subprocess.PIPE, text=True, preexec_fn=_as_in_a_terminal
    )
    shm_name, *pids = process.stdout.readline().split()
    assert process.stdout.readline().strip() in ("stepping", "resetting", "idle", "closing")
    time.sleep(0.5)
    return process, shm_name.lstrip("/"), [int(p) for p in pids]


def _wait_until_clean(tag: str, pids: list, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not any(tag in name for name in leftovers()) and all(_pid_gone(pid) for pid in pids):
            return
        time.sleep(0.1)
    raise AssertionError(
        f"left behind after {seconds} s: {[n for n in leftovers() if tag in n]}, "
        f"live servers {[p for p in pids if not _pid_gone(p)]}"
    )


@pytest.mark.parametrize("phase", ["step", "reset"])
def test_ctrl_c_during_a_hung_call_exits_and_cleans_up(phase):
    process, tag, pids = _start_agent(phase)
    process.send_signal(signal.SIGINT)
    assert process.wait(timeout=30) != 0
    _wait_until_clean(tag, pids, 10)


@pytest.mark.parametrize("mode", ["idle", "idle-forked", "step", "spin", "closing"])
def test_servers_clean_up_after_their_agent_is_sigkilled(mode):
    """Idle servers notice at once; servers stuck in an env (mid-step) through their watchdog; an
    agent killed inside ``close()``, while a server still closes its env, leaves no run directory."""
    process, tag, pids = _start_agent(mode)
    process.kill()
    process.wait()
    _wait_until_clean(tag, pids, 10)


def test_gc_reclaims_only_dead_owners():
    from portal_shm.runtimes.gc import collect

    process = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import os, sys; "
            "open(f'/dev/shm/psm-{os.getpid()}-abcdef01', 'wb').write(bytes(4096)); "
            "print(os.getpid(), flush=True)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    dead_pid = int(process.stdout.readline())
    process.wait()
    envs = portal_shm.make_vec("CartPole-v1", 1)
    try:
        collected = collect()
        names = [item.name for item in collected]
        assert f"psm-{dead_pid}-abcdef01" in names
        assert not any(envs.tag in name for name in names)
        envs.reset(seed=0)
        envs.step(np.zeros(1, np.int64))
    finally:
        envs.close()


@pytest.mark.parametrize("call", ["reset", "get_attr", "close"])
def test_control_calls_to_a_killed_server_never_hang(call):
    envs = portal_shm.make_vec("CartPole-v1", 2, vector_kwargs={"envs_per_server": 1})
    try:
        envs.reset(seed=0)
        pid = _server_pids(envs)[0]
        os.kill(pid, signal.SIGKILL)
        time.sleep(0.2)
        started = time.monotonic()
        if call == "close":
            envs.close()
        else:
            with pytest.raises(portal_shm.errors.ServerDiedError, match="SIGKILL"):
                envs.reset(seed=0) if call == "reset" else envs.get_attr("gravity")
        assert time.monotonic() - started < 5
    finally:
        envs.close()
