"""The frames between an agent and a zygote: whole frames only, bounded, maps only."""

import socket
import struct
import subprocess
import sys

import pytest

from portal_shm.server.zygote import describe_status
from portal_shm.wire import protocol as P
from portal_shm.wire.zygote_frames import MAX_FRAME, send_frame, take_frames


def test_frames_come_out_whole_in_order_and_a_partial_one_waits():
    left, right = socket.socketpair()
    with left, right:
        send_frame(left, {"cmd": "fork", "id": 1})
        send_frame(left, {"cmd": "signal", "pid": 7, "signal": 15})
        data = right.recv(1 << 16)
    buffer = bytearray(data[:-3])
    first = take_frames(buffer)
    assert first == [{"cmd": "fork", "id": 1}]
    buffer += data[-3:]
    assert take_frames(buffer) == [{"cmd": "signal", "pid": 7, "signal": 15}]
    assert buffer == bytearray()


def test_an_oversized_or_non_map_frame_is_refused():
    with pytest.raises(P.ProtocolError, match="over the"):
        take_frames(bytearray(struct.pack(">I", MAX_FRAME + 1)))
    data = P.packb([1, 2])
    with pytest.raises(P.ProtocolError, match="not a map"):
        take_frames(bytearray(struct.pack(">I", len(data)) + data))


def _blockers(setup: str) -> str:
    """``fork_blockers`` in a fresh interpreter after ``setup`` (this one runs pytest's threads)."""
    code = (
        "from portal_shm.server.zygote import _native_threads, fork_blockers\n"
        "before = _native_threads()\n" + setup + "\nprint(fork_blockers(before))"
    )
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()


def test_a_process_whose_envs_started_no_threads_may_fork_and_one_whose_envs_did_may_not():
    assert _blockers("import numpy") == ""
    threads = "import threading, time\nthreading.Thread(target=time.sleep, args=(5,), daemon=True).start()"
    assert _blockers(threads) == "1 Python thread(s)"
    child = "import subprocess\nchild = subprocess.Popen(['sleep', '5'])"
    assert _blockers(child) == "1 child process(es)"


def _after_closing(stop_on_close: bool) -> str:
    """``imports_only`` in a fresh interpreter, over a ``ThreadingEnv`` (its thread started as it was made)."""
    code = (
        "from portal_shm.server.zygote import _native_threads, fork_blockers, imports_only\n"
        "from portal_shm.example_envs import ThreadingEnv\n"
        "before = _native_threads()\n"
        f"envs = [ThreadingEnv(stop_on_close={stop_on_close})]\n"
        "print(repr(fork_blockers(before)), repr(imports_only(envs, [0], before)), len(envs))"
    )
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()


def test_envs_whose_threads_end_as_they_close_leave_a_process_that_may_fork():
    assert _after_closing(True) == "'1 Python thread(s)' '' 0"  # (closed, and the list emptied)
    assert _after_closing(False) == "'1 Python thread(s)' '1 Python thread(s)' 0"


def test_exit_statuses_read_as_the_process_backend_writes_them():
    assert describe_status(0) == "exit code 0"
    assert describe_status(3 << 8) == "exit code 3"
    assert describe_status(9) == "killed by SIGKILL (exit status -9)"
