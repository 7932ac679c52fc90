"""RecordVideo: only the chosen envs render, on their own servers, and each video has one frame per
step of its episode, in lockstep (every autoreset mode), in async batches and through env hosts."""

from __future__ import annotations

import os

import numpy as np
import pytest

import portal_shm
from portal_shm.agent.record_video import FRAME_KEY

imageio = pytest.importorskip("imageio.v2", reason="RecordVideo needs the video extra (imageio, imageio-ffmpeg)")

NULL_ENV = "portal_shm.server.example_envs:NullEnv"
RECORDED = 5


class EpisodeLengths:
    """Each followed env's episode lengths, counted from what the caller sees: a step with the
    env in it, except the reset results (NextStep's autoreset step, an async reset's batch)."""

    def __init__(self, ids, next_step: bool, after_reset: bool) -> None:
        self.next_step = next_step
        self.current = {i: 0 for i in ids}
        self.skip = {i: after_reset for i in ids}
        self.lengths = {i: [] for i in ids}

    def add(self, terminated, truncated, infos) -> None:
        batch = infos.get("env_id", np.arange(len(terminated)))
        for position, i in enumerate(batch.tolist()):
            if i not in self.current:
                continue
            if self.skip[i]:
                self.skip[i] = False
                continue
            self.current[i] += 1
            if terminated[position] or truncated[position]:
                self.lengths[i].append(self.current[i])
                self.current[i] = 0
                self.skip[i] = self.next_step


def frame_count(path: str) -> int:
    reader = imageio.get_reader(path)
    try:
        return reader.count_frames()
    finally:
        reader.close()


def assert_no_frames(infos: dict) -> None:
    for holder in (infos, infos.get("final_info", {})):
        assert FRAME_KEY not in holder and "_" + FRAME_KEY not in holder, sorted(holder)


def run_recorded(envs, folder, steps: int, env_indices=(RECORDED,), every: int = 2, renders: bool = True):
    """Step ``envs`` under RecordVideo with random actions: the wrapper (to close), the episode
    lengths and, for NullEnv, each env's render count before ``close()``."""
    batched = envs.batch_size < envs.num_envs
    recorder = portal_shm.RecordVideo(envs, folder, env_indices=list(env_indices), every_n_episodes=every)
    lengths = EpisodeLengths(env_indices, envs.metadata["autoreset_mode"].value == "NextStep", batched)
    recorder.action_space.seed(0)
    _, infos = recorder.reset(seed=0)
    assert_no_frames(infos)
    if batched:
        lengths.add(np.zeros(len(infos["env_id"]), bool), np.zeros(len(infos["env_id"]), bool), infos)
    t = 0
    # With async batches, stop when the recorded env's last step came back: a step still in flight
    # may have rendered a frame the wrapper has not seen yet.
    while t < steps or (batched and env_indices[0] not in infos["env_id"]):
        if batched:
            recorder.send(recorder.action_space.sample(), infos["env_id"])
            _, _, terminated, truncated, infos = recorder.recv()
        else:
            _, _, terminated, truncated, infos = recorder.step(recorder.action_space.sample())
        assert_no_frames(infos)
        lengths.add(terminated, truncated, infos)
        t += 1
    return recorder, lengths, recorder.get_attr("renders") if renders else None


def expected_videos(folder, i: int, lengths: list, every: int) -> dict:
    return {os.path.join(folder, f"env{i}-episode{k}.mp4"): n for k, n in enumerate(lengths) if k % every == 0}


@pytest.mark.parametrize(
    "vector_kwargs",
    [
        pytest.param({"autoreset_mode": "NextStep"}, id="lockstep-NextStep"),
        pytest.param({"autoreset_mode": "SameStep"}, id="lockstep-SameStep"),
        pytest.param({"batch_size": 8}, id="async-batches"),
    ],
)
def test_env_5_of_16_every_2_episodes_has_one_frame_per_step_and_no_other_env_renders(tmp_path, vector_kwargs):
    envs = portal_shm.make_vec(
        NULL_ENV, 16, vector_kwargs=vector_kwargs, shape=(210, 160, 3), episode_length=7, render_mode="rgb_array"
    )
    recorder, lengths, renders = run_recorded(envs, str(tmp_path), steps=60 * envs.num_envs // envs.batch_size)
    recorder.close()
    done = lengths.lengths[RECORDED]
    assert len(done) >= 4
    expected = expected_videos(str(tmp_path), RECORDED, done, every=2)
    # the episode running at close() is written as far as it got
    partial = lengths.current[RECORDED]
    if partial and len(done) % 2 == 0:
        expected[os.path.join(str(tmp_path), f"env{RECORDED}-episode{len(done)}.mp4")] = partial
    assert sorted(recorder.videos) == sorted(expected)
    assert {path: frame_count(path) for path in recorder.videos} == expected
    # counted by the envs themselves, on their servers: env 5 rendered once per recorded frame
    assert renders[RECORDED] == sum(expected.values())
    assert [n for i, n in enumerate(renders) if i != RECORDED] == [0] * 15


def test_big_frames_travel_beside_the_ring_and_small_ones_in_it(tmp_path):
    """A 210x160x3 frame exceeds the default info_capacity: it spills to the step's EXTRA message."""
    for shape, spilled in (((210, 160, 3), True), ((6, 8, 3), False)):
        envs = portal_shm.make_vec(NULL_ENV, 4, shape=shape, episode_length=5, render_mode="rgb_array")
        recorder = portal_shm.RecordVideo(envs, str(tmp_path / str(shape[0])), env_indices=[1], every_n_episodes=1)
        recorder.reset(seed=0)
        lengths = envs._ring.info_len
        for _ in range(3):
            recorder.step(recorder.action_space.sample())
            assert (lengths[:, 1] == -1).any() == spilled
            assert (lengths[:, [0, 2, 3]] == 0).all()
        recorder.close()
        assert [frame_count(path) for path in recorder.videos] == [3]


def test_cartpole_episodes_of_varying_length(tmp_path):
    envs = portal_shm.make_vec("CartPole-v1", 4, render_mode="rgb_array")
    recorder, lengths, _ = run_recorded(envs, str(tmp_path), steps=120, env_indices=(1, 2), every=1, renders=False)
    recorder.close()
    for i in (1, 2):
        done = lengths.lengths[i]
        assert len(done) >= 2 and len(set(done)) > 1
        for k, n in enumerate(done):
            assert frame_count(os.path.join(str(tmp_path), f"env{i}-episode{k}.mp4")) == n
    reader = imageio.get_reader(recorder.videos[0])
    assert reader.get_meta_data()["size"] == (600, 400)
    reader.close()


def test_an_env_without_rgb_array_rendering_fails_with_the_fix(tmp_path):
    envs = portal_shm.make_vec(NULL_ENV, 2, shape=(4, 4, 3))
    recorder = portal_shm.RecordVideo(envs, str(tmp_path), env_indices=[1])
    try:
        with pytest.raises(portal_shm.PortalError, match=r"env 1 cannot be recorded.*render_mode='rgb_array'"):
            recorder.reset(seed=0)
    finally:
        recorder.close()
    with pytest.raises(ValueError, match="distinct env indices"):
        portal_shm.RecordVideo(portal_shm.make_vec(NULL_ENV, 2, shape=(4, 4, 3)), str(tmp_path), env_indices=[2])


def test_record_frames_off_stops_rendering(tmp_path):
    envs = portal_shm.make_vec(NULL_ENV, 4, shape=(4, 6, 3), episode_length=100, render_mode="rgb_array")
    try:
        envs.reset(seed=0)
        envs.record_frames([2], True)
        _, _, _, _, infos = envs.step(envs.action_space.sample())
        assert infos[FRAME_KEY]["_data"].tolist() == [False, False, True, False]
        entry = {key: infos[FRAME_KEY][key][2] for key in ("shape", "dtype", "data")}
        assert entry == {"shape": [4, 6, 3], "dtype": "uint8", "data": bytes(72)}
        # every step has its frame, the stats' sampled steps too (their timed stand-ins wrap the recorded env)
        for _ in range(2 * 16):
            _, _, _, _, infos = envs.step(envs.action_space.sample())
            assert infos[FRAME_KEY]["_data"].tolist() == [False, False, True, False]
        envs.record_frames([2], False)
        _, _, _, _, infos = envs.step(envs.action_space.sample())
        assert FRAME_KEY not in infos
        assert envs.get_attr("renders") == (0, 0, 1 + 2 * 16, 0)
    finally:
        envs.close()


@pytest.mark.parametrize("shape, size", [((5, 7, 3), (8, 6)), ((6, 8), (8, 6)), ((4, 6, 1), (6, 4))])
def test_odd_sides_and_grey_frames_become_even_rgb_videos(tmp_path, shape, size):
    envs = portal_shm.make_vec(NULL_ENV, 2, shape=shape, episode_length=4, render_mode="rgb_array")
    recorder, lengths, _ = run_recorded(envs, str(tmp_path), steps=5, env_indices=(1,), every=1, renders=False)
    recorder.close()
    assert lengths.lengths[1] == [4]
    reader = imageio.get_reader(recorder.videos[0])
    assert reader.get_meta_data()["size"] == size and reader.count_frames() == 4
    reader.close()


def test_the_record_verb_writes_the_episodes_asked_for(tmp_path, capsys):
    from portal_shm.cli.app import main

    folder = tmp_path / "videos"
    argv = ["record", NULL_ENV, "-n", "3", "--env-index", "2", "--episodes", "2", "--folder", str(folder)]
    with pytest.raises(SystemExit) as exit:
        main(argv + ["--kwarg", "episode_length=9"])
    assert exit.value.code == 0
    assert sorted(os.listdir(folder)) == ["env2-episode0.mp4", "env2-episode1.mp4"]
    assert [frame_count(str(folder / name)) for name in sorted(os.listdir(folder))] == [9, 9]
    assert "env2-episode1.mp4" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exit:
        main(["record", NULL_ENV, "-n", "3", "--env-index", "3"])
    assert exit.value.code == 1
    assert "--env-index 3 is not one of the 3 envs" in capsys.readouterr().err


@pytest.fixture(scope="module")
def hosts(tmp_path_factory):
    from tests.integration.remote_hosts import EXAMPLE_ENVS, HostProcess, Keys

    keys = Keys(str(tmp_path_factory.mktemp("record-keys")))
    processes = [HostProcess(keys, *EXAMPLE_ENVS) for _ in range(2)]
    yield keys, processes
    for process in processes:
        process.stop()
    for process in processes:
        assert process.process.returncode == 0, process.log


@pytest.mark.parametrize("vector_kwargs", [{}, {"batch_size": 8}], ids=["lockstep", "async-batches"])
def test_the_same_through_two_env_hosts(tmp_path, hosts, vector_kwargs):
    """Env 5 lives on the first host, env 12 on the second (its env 4 there): frames come back
    through each host's replies, and the other envs on both hosts never render."""
    keys, processes = hosts
    envs = portal_shm.make_vec(
        NULL_ENV,
        16,
        backend="remote",
        hosts=[p.address for p in processes],
        **keys.options(),
        vector_kwargs=vector_kwargs,
        shape=(210, 160, 3),
        episode_length=6,
        render_mode="rgb_array",
    )
    steps = 40 * envs.num_envs // envs.batch_size
    recorder, lengths, renders = run_recorded(envs, str(tmp_path), steps=steps, env_indices=(RECORDED, 12))
    recorder.close()
    written = {path: frame_count(path) for path in recorder.videos}
    for i in (RECORDED, 12):
        expected = expected_videos(str(tmp_path), i, lengths.lengths[i], every=2)
        assert len(expected) >= 2
        assert {path: n for path, n in written.items() if expected.keys() & {path}} == expected
    assert [n for i, n in enumerate(renders) if i not in (RECORDED, 12)] == [0] * 14
    assert renders[RECORDED] > 0 and renders[12] > 0
