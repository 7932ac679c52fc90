"""Hypothesis profiles: ``ci`` (default, thousands of cases in seconds) and ``long``.

Select with ``pytest --hypothesis-profile=long`` or ``HYPOTHESIS_PROFILE=long``. Tests that
fuzz decoders leave ``max_examples`` to the profile; ``long`` multiplies them by 25 and lifts
pytest-timeout's per-test limit for them (a long fuzz run takes many minutes per test).
"""

import os

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile("ci", max_examples=2000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("long", max_examples=50_000, deadline=None, suppress_health_check=list(HealthCheck))
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


def pytest_collection_modifyitems(config, items):
    profile = config.getoption("hypothesis_profile", None) or os.environ.get("HYPOTHESIS_PROFILE", "ci")
    if profile == "long":
        for item in items:
            if item.fspath.basename == "test_fuzz.py":
                item.add_marker(pytest.mark.timeout(0))
