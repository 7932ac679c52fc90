"""Set before any test module imports Ray, which reads it at import: with it, ``ray.init`` keeps
127.0.0.1 as the nodes' address instead of rewriting it into the machine's own and hanging there."""

import os

os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"


import pytest  # noqa: E402  (after the variable Ray reads at import)


def pytest_collection_modifyitems(config, items):
    """Every test that uses the ``docker_client`` fixture needs Docker: ``-m "not docker"`` leaves it out."""
    for item in items:
        if "docker_client" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.docker)
