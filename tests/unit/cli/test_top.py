"""``portal-shm top`` against a real portal stepping CartPole in this process: the JSON snapshot,
and the live view in a pseudo-terminal, quit with ``q``, the terminal as it was afterwards."""

from __future__ import annotations

import fcntl
import json
import os
import pathlib
import re
import select
import shutil
import struct
import subprocess
import sys
import tempfile
import termios
import threading
import time

import numpy as np
import pytest

import portal_shm
from portal_shm.agent.stats import bound
from portal_shm.cli.top_model import TopModel, sparkline
from portal_shm.runtimes.resources import RUN_DIR_ENV_VAR

ANSI = re.compile(rb"\x1b(\[[0-9;?]*[A-Za-z]|\][^\x07]*\x07|[()][A-Z0-9]|[=>78])")


@pytest.fixture
def run_base(monkeypatch):
    """A run base dir of the test's own (short: the portal's unix sockets live in it), so ``top``
    sees this test's portal and no one else's."""
    base = tempfile.mkdtemp(prefix="top-", dir="/tmp")
    monkeypatch.setenv(RUN_DIR_ENV_VAR, base)
    yield base
    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def stepping(run_base):
    """A CartPole portal of 4 envs stepped with random actions in a background thread."""
    envs = portal_shm.make_vec("CartPole-v1", 4)
    envs.reset(seed=0)
    stop = threading.Event()

    def step() -> None:
        actions = np.zeros(4, np.int64)
        while not stop.is_set():
            envs.step(actions)

    thread = threading.Thread(target=step, daemon=True)
    thread.start()
    try:
        yield envs
    finally:
        stop.set()
        thread.join(timeout=30)
        envs.close()


def _command(*args: str) -> list[str]:
    return [sys.executable, "-m", "portal_shm", "top", *args]


def test_json_snapshot_has_the_portal_its_envs_and_a_verdict(stepping):
    time.sleep(1.5)  # a window of steps to judge
    done = subprocess.run(_command("--once", "--json"), capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    portals = json.loads(done.stdout)["portals"]
    (portal,) = [p for p in portals if p["tag"] == stepping.tag]
    assert portal["state"] == "live" and portal["pid"] == os.getpid()
    assert portal["env_id"] == "CartPole-v1" and portal["num_envs"] == 4
    stats = portal["stats"]
    assert [e["env"] for e in stats["envs"]] == [0, 1, 2, 3]
    assert all(e["steps"] > 0 and e["latency_us"]["p50"] > 0 for e in stats["envs"])
    assert sorted(i for s in stats["servers"] for i in s["envs"]) == [0, 1, 2, 3]
    assert stats["steps_per_s"] > 0
    assert stats["bound"]["verdict"] in ("agent", "straggler", "env", "transport")
    assert stats["bound"]["why"]


def test_plain_snapshot_shows_the_portal_and_its_envs(stepping):
    done = subprocess.run(_command(), capture_output=True, text=True, timeout=60)  # piped: one snapshot
    assert done.returncode == 0, done.stderr
    assert "CartPole-v1 x 4" in done.stdout and "env-steps/s" in done.stdout and "verdict" in done.stdout
    assert re.search(r"^\s+env 3\s+[\d,]+", done.stdout, re.M), done.stdout


def test_no_portals_says_so_in_one_line(run_base):
    done = subprocess.run(_command("--once"), capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.strip().startswith("no portals running on this machine")
    assert len(done.stdout.strip().splitlines()) == 1


def test_a_portal_that_does_not_step_is_idle(run_base):
    envs = portal_shm.make_vec("CartPole-v1", 2)
    try:
        (view,) = TopModel().snapshot(wait_s=1.5)
        assert view.tag == envs.tag and view.state == "idle" and view.stats is None
    finally:
        envs.close()


def test_sparkline_scales_to_its_maximum():
    assert sparkline([0, 1, 2, 4]) == "▁▃▅█"
    assert sparkline([0, 0]) == "▁▁" and sparkline([]) == ""


def _read_until(master: int, pattern: re.Pattern, timeout: float) -> bytes:
    """Output of the pty until ``pattern`` matches it with escape sequences taken out."""
    seen = b""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        ready, _, _ = select.select([master], [], [], 0.2)
        if ready:
            try:
                seen += os.read(master, 65536)
            except OSError:
                break
            if pattern.search(ANSI.sub(b"", seen)):
                return seen
    raise AssertionError(f"no {pattern.pattern!r} in the live view within {timeout} s:\n{ANSI.sub(b'', seen)[-3000:]}")


def test_live_view_in_a_terminal_quits_on_q_and_restores_it(stepping):
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 160, 0, 0))
    before = termios.tcgetattr(slave)
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    env["TERM"] = "xterm"
    process = subprocess.Popen(
        _command("--interval", "0.5"), stdin=slave, stdout=slave, stderr=slave, env=env, start_new_session=True
    )
    try:
        shown = _read_until(master, re.compile(rb"CartPole-v1 x 4.*?[\d,]+ env-steps/s", re.S), timeout=30)
        text = ANSI.sub(b"", shown)
        assert b"server 0" in text and b"verdict" in text
        assert termios.tcgetattr(slave)[3] & termios.ICANON == 0  # cbreak while it runs
        os.write(master, b"q")
        assert process.wait(timeout=15) == 0
        rest = b""
        while select.select([master], [], [], 0.2)[0]:
            try:
                chunk = os.read(master, 65536)
            except OSError:
                break
            if not chunk:
                break
            rest += chunk
        output = shown + rest
        assert b"\x1b[?1049l" in output  # left the alternate screen: the shell's screen is back
        assert b"Traceback" not in output
        assert termios.tcgetattr(slave) == before  # echo and line mode as they were
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        os.close(master)
        os.close(slave)


def test_the_docs_quote_the_verdict_rules_as_bound_states_them():
    section = (pathlib.Path(__file__).parents[3] / "docs" / "performance" / "where-the-time-goes.md").read_text()
    for name in ("MIN_CALLS", "AWAY", "STRAGGLER_RATIO", "STRAGGLER_MIN_US", "MIN_SAMPLES", "ENV_BUSY"):
        assert f"`{name} = {getattr(bound, name)!r}`" in section, name
    for verdict in ("agent", "straggler", "env", "transport"):
        assert f'| `"{verdict}"` |' in section, verdict
