"""Hypothesis profiles: ``ci`` (default, thousands of cases in seconds) and ``long``.

Select with ``pytest --hypothesis-profile=long`` or ``HYPOTHESIS_PROFILE=long``. Tests that
fuzz decoders leave ``max_examples`` to the profile; ``long`` multiplies them by 25 and lifts
pytest-timeout's per-test limit for them (a long fuzz run takes many minutes per test).

What libraries write to /tmp by default goes into one directory of this run, removed at its end
(``.ci/run`` fails on new ``/tmp/SB3-*`` and ``/tmp/ray/session_*``): Stable-Baselines3's logger
folder (``SB3_LOGDIR``; every ``learn()`` otherwise makes a ``/tmp/SB3-<time>``) and Ray's temp
directory (``RAY_TMPDIR``; every local Ray otherwise leaves a ``/tmp/ray/session_*``). Set here, at
import, before any test imports Ray, and inherited by the processes tests start. The directory is
short (``/tmp/psm-tests-XXXXXX``): Ray's unix socket paths under it must stay within 107 bytes.
"""

import os
import shutil
import sys
import tempfile
import time

import pytest
from hypothesis import HealthCheck, settings

_SCRATCH = tempfile.mkdtemp(prefix="psm-tests-", dir="/tmp" if os.path.isdir("/tmp") else None)
os.environ.setdefault("SB3_LOGDIR", os.path.join(_SCRATCH, "sb3"))  # (a developer's own choice stands)
os.environ.setdefault("RAY_TMPDIR", _SCRATCH)  # Ray makes its "ray" folder in it


def pytest_unconfigure(config):
    """At the end of the run: Ray shut down if a test left this process connected, then the run's
    scratch directory (Ray's sessions, SB3's logger folders) removed."""
    ray = sys.modules.get("ray")  # (only if a test imported it: importing Ray takes seconds)
    if ray is not None and ray.is_initialized():
        ray.shutdown()
    for _ in range(20):  # Ray's daemons may still be writing their last logs while they exit
        shutil.rmtree(_SCRATCH, ignore_errors=True)
        if not os.path.exists(_SCRATCH):
            break
        time.sleep(0.25)


settings.register_profile("ci", max_examples=2000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("long", max_examples=50_000, deadline=None, suppress_health_check=list(HealthCheck))
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


def pytest_collection_modifyitems(config, items):
    profile = config.getoption("hypothesis_profile", None) or os.environ.get("HYPOTHESIS_PROFILE", "ci")
    if profile == "long":
        for item in items:
            if item.fspath.basename == "test_fuzz.py":
                item.add_marker(pytest.mark.timeout(0))


# -- lanes and their times -------------------------------------------------------------------------------
# A test's lane is its first marker of LANES (docker, training, slow), else "fast"; the run ends
# with each lane's count and time (setup, call and teardown together), so CI's log says what each
# costs. ``-m "not docker and not training and not slow"`` runs the fast lane alone.
LANES = ("docker", "training", "slow")
_lane_times: dict = {}


def _lane(item) -> str:
    names = {mark.name for mark in item.iter_markers()}
    return next((lane for lane in LANES if lane in names), "fast")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    started = time.monotonic()
    yield
    count, seconds = _lane_times.get(_lane(item), (0, 0.0))
    _lane_times[_lane(item)] = (count + 1, seconds + time.monotonic() - started)


def pytest_terminal_summary(terminalreporter):
    if not _lane_times:
        return
    terminalreporter.section("lanes")
    for lane in ("fast",) + LANES:
        if lane in _lane_times:
            count, seconds = _lane_times[lane]
            terminalreporter.write_line(f"{lane:9s} {count:5d} tests {seconds:8.1f} s")
