"""RecordVideo in the project's images, headless: ALE Pong in ``portal-shm/ale`` renders its frames on
its own server in the container, and each mp4 has one 210x160 frame per step of its episode."""

from __future__ import annotations

import os

import numpy as np
import pytest

import portal_shm
from tests.unit.test_record_video import RECORDED, frame_count, run_recorded

pytestmark = pytest.mark.docker

imageio = pytest.importorskip("imageio.v2", reason="RecordVideo needs the video extra (imageio, imageio-ffmpeg)")


@pytest.fixture(scope="module")
def ale_image():
    from tests.integration.test_docker import _docker_or_skip, ensure_image

    # The image's env server is the checkout's as of its build: rebuild it (portal-shm build ale,
    # or scripts/provision-docker.sh) after changing portal_shm/server.
    return ensure_image(_docker_or_skip(), "ale", "portal-shm/ale")


def test_pong_in_its_image_records_env_5_of_8_headless(tmp_path, ale_image):
    envs = portal_shm.make_vec(
        "ALE/Pong-v5", 8, backend="docker", image=ale_image, render_mode="rgb_array", max_episode_steps=60
    )
    recorder, lengths, _ = run_recorded(envs, str(tmp_path), steps=130, every=1, renders=False)
    recorder.close()
    done = lengths.lengths[RECORDED]
    assert done == [60, 60]  # TimeLimit's truncation ends each episode
    for k, n in enumerate(done):
        path = os.path.join(str(tmp_path), f"env{RECORDED}-episode{k}.mp4")
        assert frame_count(path) == n
        reader = imageio.get_reader(path)
        assert reader.get_meta_data()["size"] == (160, 210)
        frames = [frame for _, frame in zip(range(3), reader)]
        reader.close()
        assert all(frame.shape == (210, 160, 3) and np.ptp(frame) > 0 for frame in frames)  # Pong, not black
    partial = [f"env{RECORDED}-episode2.mp4"] if lengths.current[RECORDED] else []  # cut by close()
    assert sorted(os.listdir(tmp_path)) == [f"env{RECORDED}-episode{k}.mp4" for k in range(2)] + partial
