"""RecordVideo in the project's images, headless: ALE Pong in the ``ale`` image renders its frames on
its own server in the container, into a frame ring the agent made (the container gets its descriptor
as it gets the main ring's), and each mp4 has one 210x160 frame per step of its episode."""

from __future__ import annotations

import os

import numpy as np
import pytest

import portal_shm
from testkit.record_video import RECORDED, assert_nothing_left, frame_count, frames_written, run_recorded

pytestmark = pytest.mark.docker

imageio = pytest.importorskip("imageio.v2", reason="RecordVideo needs the video extra (imageio, imageio-ffmpeg)")


@pytest.fixture(scope="module")
def ale_image():
    from portal_shm.runtimes.image_build import build_image
    from testkit.docker_images import docker_or_skip

    # The ale image with this checkout's env server (frame rings are new on the env side); its
    # packages' layer comes from the build cache of portal-shm/ale.
    docker_or_skip()
    return build_image("ale", "portal-shm-test/ale-record")


def test_pong_in_its_image_records_env_5_of_8_headless(tmp_path, ale_image):
    envs = portal_shm.make_vec(
        "ALE/Pong-v5", 8, backend="docker", image=ale_image, render_mode="rgb_array", max_episode_steps=60
    )
    recorder, lengths, _ = run_recorded(envs, str(tmp_path), steps=130, every=1, renders=False)
    written = frames_written()
    recorder.close()
    assert_nothing_left()
    # all frames but the first (which told the agent their shape) came through the ring from the container
    assert list(written.values()) == [sum(lengths.lengths[RECORDED]) + lengths.current[RECORDED] - 1]
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
