"""Docker for the tests: a client or a skip, the project's images built from this checkout when
missing or stale, a portal's containers.

Without a Docker daemon the tests that need one are skipped, unless ``PORTAL_SHM_REQUIRE_DOCKER=1``
(CI), where a missing Docker fails the run instead of hiding it.
"""

from __future__ import annotations

import os
from typing import Any

__all__ = ["docker_or_skip", "ensure_image", "portal_containers"]


def docker_or_skip() -> Any:
    """A Docker client; skips the test (or fails it, under ``PORTAL_SHM_REQUIRE_DOCKER=1``) without one."""
    import pytest

    from portal_shm.runtimes.docker import DockerUnavailableError, docker_client

    try:
        return docker_client()
    except DockerUnavailableError as exc:
        if os.environ.get("PORTAL_SHM_REQUIRE_DOCKER") == "1":
            raise
        pytest.skip(str(exc))


def ensure_image(client: Any, name: str, tag: str) -> str:
    """``tag``, built from ``portal_shm/images/<name>`` unless it exists with this checkout's env-side wheel."""
    from portal_shm.runtimes.docker import LABEL_SERVER_DIGEST
    from portal_shm.runtimes.env_wheel import env_wheel_digest
    from portal_shm.runtimes.image_build import build_image

    try:
        current = client.images.get(tag).labels.get(LABEL_SERVER_DIGEST) == env_wheel_digest()
    except Exception:
        current = False
    if not current:  # missing, or built from other env-side code (a machine that kept older images)
        build_image(name, tag)
    return tag


def portal_containers(client: Any, tag: str) -> list:
    """The containers (running or not) of the portal ``tag``."""
    return client.containers.list(all=True, filters={"label": f"portal-shm.portal={tag}"})
