"""Images ``portal-shm build`` makes carry the digest of the env-side wheel installed in them; an
agent starting containers of an image built from other env-side code says so once per image (a stale image
starts and then misreads what changed, which no handshake can name)."""

import warnings

import pytest

from portal_shm.runtimes import docker as docker_backend
from portal_shm.runtimes.docker import LABEL_ENV_IMAGE, LABEL_SERVER_DIGEST, warn_if_stale
from portal_shm.runtimes.env_wheel import env_wheel_digest
from portal_shm.runtimes.image_build import build_labels, builtin_images_dir


@pytest.fixture(autouse=True)
def _fresh_warnings(monkeypatch):
    monkeypatch.setattr(docker_backend, "_warned_stale_images", set())


def test_built_images_are_labelled_with_this_codes_env_wheel_digest():
    images = builtin_images_dir()
    env_labels = build_labels(images / "ale")
    agent_labels = build_labels(images / "agent")
    assert env_labels == {LABEL_ENV_IMAGE: "1", LABEL_SERVER_DIGEST: env_wheel_digest()}
    assert agent_labels == {LABEL_SERVER_DIGEST: env_wheel_digest()}


def test_an_image_of_other_server_code_is_named_once_with_the_rebuild_command():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        warn_if_stale("portal-shm/pettingzoo", {LABEL_SERVER_DIGEST: "0" * 64})
        warn_if_stale("portal-shm/pettingzoo", {LABEL_SERVER_DIGEST: "0" * 64})
    assert len(caught) == 1, [str(w.message) for w in caught]
    message = str(caught[0].message)
    assert "'portal-shm/pettingzoo'" in message and "portal-shm build NAME|DIR -t portal-shm/pettingzoo" in message


@pytest.mark.parametrize("labels", [{LABEL_SERVER_DIGEST: env_wheel_digest()}, {}, {LABEL_ENV_IMAGE: "1"}])
def test_a_current_image_or_one_not_built_by_portal_shm_is_silent(labels):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warn_if_stale("someone/else", labels)
