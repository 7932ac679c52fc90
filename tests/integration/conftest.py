"""Set before any test module imports Ray, which reads it at import: with it, ``ray.init`` keeps
127.0.0.1 as the nodes' address instead of rewriting it into the machine's own and hanging there.
(A test that uses the ``docker_client`` fixture is put in the ``docker`` lane by tests/conftest.py.)"""

import os

import pytest

from testkit.docker_images import docker_or_skip

os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"


@pytest.fixture(scope="module")
def docker_client():
    """A Docker client, or the test skipped without Docker (``testkit.docker_images.docker_or_skip``)."""
    return docker_or_skip()
