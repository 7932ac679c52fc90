"""Hypothesis profiles: ``ci`` (default, thousands of cases in seconds) and ``long``.

Select with ``pytest --hypothesis-profile=long`` or ``HYPOTHESIS_PROFILE=long``. Tests that
fuzz decoders leave ``max_examples`` to the profile; ``long`` multiplies them by 25 and lifts
pytest-timeout's per-test limit for them (a long fuzz run takes many minutes per test).

What libraries write to /tmp by default goes into one directory of this run, removed at its end
(``.ci/run`` fails on any new entry of /tmp and /dev/shm): Stable-Baselines3's logger folder
(``SB3_LOGDIR``; every ``learn()`` otherwise makes a ``/tmp/SB3-<time>``), Ray's temp directory
(``RAY_TMPDIR``; every local Ray otherwise leaves a ``/tmp/ray/session_*``) and pytest's own
``tmp_path`` folders (``--basetemp``, and ``PYTEST_DEBUG_TEMPROOT`` for pytest runs that tests
start; otherwise ``/tmp/pytest-of-<user>`` keeps the last three runs' files, test keys among them).
Set here, at import, before any test imports Ray, and inherited by the processes tests start
(xdist's workers get their ``tmp_path`` base from the controller, inside its directory). The
directory is short (``/tmp/psm-tests-XXXXXX``): unix socket paths under it (Ray's, portals' in a
``tmp_path``) must stay within 107 bytes.

With ``PORTAL_SHM_TMP_BEFORE=FILE`` (``.ci/run``) the controller first lists /tmp and /dev/shm into
FILE: the "before" of CI's leftovers check, taken as pytest starts, after whatever set the machine
up (pip, Docker's provisioning) made its own entries.
"""

import os
import shutil
import sys
import tempfile
import time

import pytest
from hypothesis import HealthCheck, settings


def _list_tmp(path: str) -> None:
    """/tmp and /dev/shm, one ``DIR/NAME`` a line, into a new file ``path`` (kept if it exists: a
    pytest started by a test inherits the variable)."""
    names = [os.path.join(d, n) for d in ("/tmp", "/dev/shm") if os.path.isdir(d) for n in os.listdir(d)]
    try:
        with open(path, "x") as listing:
            listing.write("".join(f"{name}\n" for name in sorted(names)))
    except FileExistsError:
        pass


if os.environ.get("PORTAL_SHM_TMP_BEFORE") and not os.environ.get("PYTEST_XDIST_WORKER"):
    _list_tmp(os.environ["PORTAL_SHM_TMP_BEFORE"])
_SCRATCH = tempfile.mkdtemp(prefix="psm-tests-", dir="/tmp" if os.path.isdir("/tmp") else None)
os.environ.setdefault("SB3_LOGDIR", os.path.join(_SCRATCH, "sb3"))  # (a developer's own choice stands)
os.environ.setdefault("RAY_TMPDIR", _SCRATCH)  # Ray makes its "ray" folder in it
os.environ.setdefault("PYTEST_DEBUG_TEMPROOT", _SCRATCH)  # (for pytest runs tests start; this one: basetemp)
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", os.path.join(_SCRATCH, "inductor"))  # else /tmp/torchinductor_<user>


def pytest_unconfigure(config):
    """At the end of the run: Ray shut down if a test left this process connected, then the run's
    scratch directory (Ray's sessions, SB3's logger folders, pytest's tmp_path folders) removed."""
    ray = sys.modules.get("ray")  # (only if a test imported it: importing Ray takes seconds)
    if ray is not None and ray.is_initialized():
        ray.shutdown()
    for _ in range(20):  # Ray's daemons may still be writing their last logs while they exit
        shutil.rmtree(_SCRATCH, ignore_errors=True)
        if not os.path.exists(_SCRATCH):
            break
        time.sleep(0.25)


# xdist's workers start with COLUMNS=80 in their environment, which makes rich (portal-shm's console)
# wrap at 80 columns what it keeps whole off a terminal: each worker takes the controller's value.
@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node):
    node.workerinput["columns"] = os.environ.get("COLUMNS")


@pytest.hookimpl(tryfirst=True)  # (before pytest's tmpdir plugin reads basetemp)
def pytest_configure(config):
    workerinput = getattr(config, "workerinput", None)
    if workerinput is None and config.option.basetemp is None:
        # tmp_path folders in the scratch directory, on a path shorter than /tmp/pytest-of-<user>/pytest-N:
        # tests bind unix sockets in them (107 bytes at most); xdist's workers get folders inside it.
        config.option.basetemp = os.path.join(_SCRATCH, "t")
    if workerinput is not None and "columns" in workerinput:
        if workerinput["columns"] is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = workerinput["columns"]


settings.register_profile("ci", max_examples=2000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("long", max_examples=50_000, deadline=None, suppress_health_check=list(HealthCheck))
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


# -- lanes and their times -------------------------------------------------------------------------------
# Every test is in one lane, a marker: the first of LANES it carries (docker, training, build, slow,
# integration), else ``fast``, which this hook adds, so ``-m fast`` selects the fast lane and
# ``-m "not docker"`` everything that runs without Docker. The lane rides along in each test's
# reports (``user_properties``): the run ends with each lane's count and time (setup, call and
# teardown, summed over tests) on the process that prints, xdist's controller included.
LANES = ("docker", "training", "build", "slow", "integration")
_lane_times: dict = {}


@pytest.hookimpl(tryfirst=True)  # before pytest's own hook deselects by -m
def pytest_collection_modifyitems(config, items):
    profile = config.getoption("hypothesis_profile", None) or os.environ.get("HYPOTHESIS_PROFILE", "ci")
    for item in items:
        if profile == "long" and item.fspath.basename == "test_fuzz.py":
            item.add_marker(pytest.mark.timeout(0))
        if "docker_client" in getattr(item, "fixturenames", ()):  # the Docker engine's client: needs Docker
            item.add_marker(pytest.mark.docker)
        names = {mark.name for mark in item.iter_markers()}
        lane = next((lane for lane in LANES if lane in names), "fast")
        if lane == "fast":
            item.add_marker(pytest.mark.fast)
        item.user_properties.append(("lane", lane))


def pytest_runtest_logreport(report):
    lane = dict(report.user_properties).get("lane")
    if lane is None:
        return
    count, seconds = _lane_times.get(lane, (0, 0.0))
    _lane_times[lane] = (count + (report.when == "setup"), seconds + report.duration)


def pytest_terminal_summary(terminalreporter, config):
    if not _lane_times:
        return
    workers = getattr(config.option, "numprocesses", None)
    terminalreporter.section("lanes" + (f" (test times summed over {workers} xdist workers)" if workers else ""))
    for lane in ("fast",) + LANES:
        if lane in _lane_times:
            count, seconds = _lane_times[lane]
            terminalreporter.write_line(f"{lane:11s} {count:5d} tests {seconds:8.1f} s")
