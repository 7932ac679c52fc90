"""RecordVideo: only the chosen envs render, on their own servers, and each video has one frame per
step of its episode, in lockstep (every autoreset mode), in async batches and through env hosts."""

from __future__ import annotations

import os
import signal
import time

import numpy as np
import pytest

import portal_shm
from portal_shm.agent.video.record_video import FRAME_KEY
from testkit.record_video import (
    RECORDED,
    EpisodeLengths,
    assert_nothing_left,
    ffmpeg_children,
    frame_count,
    frame_rings,
    frames_written,
    run_recorded,
)

pytestmark = pytest.mark.integration  # env servers render, ffmpeg encodes mp4s: seconds a test

imageio = pytest.importorskip("imageio.v2", reason="RecordVideo needs the video extra (imageio, imageio-ffmpeg)")

NULL_ENV = "portal_shm.server.example_envs:NullEnv"


def ffmpeg_priorities(expected: list, timeout: float = 5.0) -> list:
    """(policy, nice) of each ffmpeg child, once they equal ``expected`` or ``timeout`` passed: the
    encoder thread sets an ffmpeg's priority just after starting it, which a test can overtake."""
    deadline = time.monotonic() + timeout
    while True:
        found = list(ffmpeg_children().values())
        if found == expected or time.monotonic() > deadline:
            return found
        time.sleep(0.01)


def idle_ffmpeg() -> tuple:
    """(policy, nice) of an ffmpeg that has not had to compete: SCHED_IDLE where this process may
    take it out of SCHED_IDLE again, else SCHED_OTHER (its nice is the one it competes at, either way)."""
    from portal_shm.agent.video.encoder import ENCODER_NICE, _may_leave_idle

    return (os.SCHED_IDLE if _may_leave_idle() else os.SCHED_OTHER, ENCODER_NICE)


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
    assert len(frame_rings()) == 1  # env 5's frame ring
    recorder.close()
    assert_nothing_left()
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


def test_the_first_frame_comes_in_the_info_and_the_others_through_a_frame_ring(tmp_path):
    """A 210x160x3 frame exceeds the default info_capacity: the first one (which tells the frame's
    shape) spills to the step's EXTRA message, a small one rides in the ring row. Every later frame
    goes through the env's frame ring and the env's info rows stay empty."""
    for shape, first in (((210, 160, 3), "spilled"), ((6, 8, 3), "in the row")):
        envs = portal_shm.make_vec(NULL_ENV, 4, shape=shape, episode_length=5, render_mode="rgb_array")
        recorder = portal_shm.RecordVideo(envs, str(tmp_path / str(shape[0])), env_indices=[1], every_n_episodes=1)
        recorder.reset(seed=0)
        lengths = envs._ring.info_len
        recorder.step(recorder.action_space.sample())
        assert ((lengths[:, 1] == -1).sum(), (lengths[:, 1] > 0).sum()) == ((1, 0) if first == "spilled" else (0, 1))
        assert len(frame_rings()) == 1
        for _ in range(11):  # the episode's 4 other steps, NextStep's reset step, the next episode
            recorder.step(recorder.action_space.sample())
        assert (lengths[:, 1] == 0).all()  # every slot of the ring written since: env 1 sent no info
        assert list(frames_written().values()) == [9]  # all frames but the first
        assert ffmpeg_priorities([idle_ffmpeg()]) == [idle_ffmpeg()]
        assert recorder.get_attr("renders") == (0, 10, 0, 0)
        recorder.close()
        assert [frame_count(path) for path in recorder.videos] == [5, 5]
        assert_nothing_left()


def test_frame_rings_off_keeps_every_frame_in_the_infos(tmp_path):
    """The fallback path on a local portal (``frame_rings=False``, as env hosts and Ray always go):
    every frame spills to the step's EXTRA message, no frame ring is made, the videos are the same."""
    envs = portal_shm.make_vec(NULL_ENV, 4, shape=(210, 160, 3), episode_length=5, render_mode="rgb_array")
    recorder = portal_shm.RecordVideo(envs, str(tmp_path), env_indices=[1], frame_rings=False)
    recorder.reset(seed=0)
    lengths = envs._ring.info_len
    for _ in range(12):
        recorder.step(recorder.action_space.sample())
    # the ring's 4 slots hold the last 4 steps: 3 with a frame, then NextStep's reset step (none)
    assert (lengths[:, 1] == -1).sum() == 3 and frame_rings() == {}
    recorder.close()
    assert [frame_count(path) for path in recorder.videos] == [5, 5]
    assert_nothing_left()


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
    assert exit.value.code == 2  # a usage error, with record's usage
    assert "--env-index 3 is not one of the 3 envs" in capsys.readouterr().err


@pytest.mark.parametrize("mode", ["NextStep", "SameStep"])
def test_the_frames_are_the_renders_of_an_in_process_replay(tmp_path, monkeypatch, mode):
    """Pong env 2 of 4 with the same seeds and actions in this process: each video's frames are,
    byte for byte, what its ``render()`` returns after each step of the episode (the bytes handed
    to ffmpeg, before H.264's losses), the first one from the info and the rest from the ring."""
    ale_py = pytest.importorskip("ale_py")
    import gymnasium as gym

    from portal_shm.agent.video import encoder as video_encoder

    handed: dict = {}
    write = video_encoder.Video.write

    def keep(self, data, shape):
        handed.setdefault(self.path, []).append(bytes(data))
        write(self, data, shape)

    monkeypatch.setattr(video_encoder.Video, "write", keep)
    kwargs = {"max_episode_steps": 30, "render_mode": "rgb_array"}
    envs = portal_shm.make_vec("ALE/Pong-v5", 4, vector_kwargs={"autoreset_mode": mode}, **kwargs)
    recorder = portal_shm.RecordVideo(envs, str(tmp_path), env_indices=[2], every_n_episodes=1)
    actions = np.random.default_rng(0).integers(0, 6, size=(75, 4))
    recorder.reset(seed=0)
    for step in actions:
        recorder.step(step)
    assert len(frame_rings()) == 1
    recorder.close()

    gym.register_envs(ale_py)
    env = gym.make("ALE/Pong-v5", **kwargs)
    env.reset(seed=2)
    episodes, frames, reset_next = [], [], False
    for step in actions:
        if reset_next:  # NextStep: this step resets the env that ended
            env.reset()
            reset_next = False
            continue
        _, _, terminated, truncated, _ = env.step(step[2])
        frames.append(env.render().tobytes())
        if terminated or truncated:
            episodes.append(frames)
            frames = []
            reset_next = mode == "NextStep"
            if mode == "SameStep":
                env.reset()
    env.close()
    episodes.append(frames)  # the episode cut by close(), as far as it got
    assert [len(frames) for frames in episodes] == [30, 30, 15 if mode == "SameStep" else 13]
    assert recorder.videos == [os.path.join(str(tmp_path), f"env2-episode{k}.mp4") for k in range(3)]
    assert [handed[path] == frames for path, frames in zip(recorder.videos, episodes)] == [True] * 3
    assert [frame_count(path) for path in recorder.videos] == [len(frames) for frames in episodes]


def test_a_lagging_encoder_makes_the_steps_wait_and_drops_no_frame(tmp_path, monkeypatch):
    """A frame ring of 4 frames and an encoder that needs 20 ms per frame: the steps of the
    recorded env wait for free slots (counted in ``stalls``, warned once), every frame is written,
    and ffmpeg, which ran on idle cores only, competes for cores from then on."""
    from portal_shm.agent.video import encoder as video_encoder
    from portal_shm.agent.video import record_video

    write = video_encoder.Video.write

    def slow(self, data, shape):
        time.sleep(0.02)
        write(self, data, shape)

    monkeypatch.setattr(video_encoder.Video, "write", slow)
    monkeypatch.setattr(record_video, "FRAME_RING_DEPTHS", (4, 4))
    envs = portal_shm.make_vec(NULL_ENV, 2, shape=(16, 16, 3), episode_length=12, render_mode="rgb_array")
    with pytest.warns(RuntimeWarning, match="frames behind env 1; its steps wait for it .* now competes for cores"):
        recorder, lengths, _ = run_recorded(envs, str(tmp_path), steps=40, env_indices=(1,), every=1)
    competing = [(os.SCHED_OTHER, 10)]  # begun after the first wait: it competes
    assert ffmpeg_priorities(competing) == competing
    recorder.close()
    assert recorder.stalls > 10
    assert lengths.lengths[1] == [12, 12, 12]
    assert [frame_count(path) for path in recorder.videos] == [12, 12, 12, 1]
    assert_nothing_left()


def test_without_the_right_to_leave_sched_idle_ffmpeg_competes_from_the_start(tmp_path, monkeypatch):
    """An idle ffmpeg that could never compete (no CAP_SYS_NICE, e.g. root in a Docker container)
    might starve: such a process niced ffmpeg from its start, as the wrapper did before."""
    from portal_shm.agent.video import encoder as video_encoder

    monkeypatch.setattr(video_encoder, "_may_leave_idle", lambda: False)
    envs = portal_shm.make_vec(NULL_ENV, 2, shape=(6, 8, 3), episode_length=50, render_mode="rgb_array")
    recorder = portal_shm.RecordVideo(envs, str(tmp_path), env_indices=[0])
    recorder.reset(seed=0)
    for _ in range(40):
        recorder.step(recorder.action_space.sample())
    expected = [(os.SCHED_OTHER, video_encoder.ENCODER_NICE)]
    assert ffmpeg_priorities(expected) == expected
    recorder.close()
    assert [frame_count(path) for path in recorder.videos] == [40]


def test_a_server_that_cannot_map_its_frame_ring_sends_its_frames_in_its_infos(tmp_path):
    """The ring handed to env 1's server is a segment too small for its geometry: the server refuses
    it with the reason, the wrapper warns and keeps env 1's frames in its infos, and the videos are
    whole."""
    import types

    from portal_shm.wire.ring import create_segment

    envs = portal_shm.make_vec(NULL_ENV, 2, shape=(6, 8, 3), episode_length=5, render_mode="rgb_array")
    hand_over = envs.record_frames_shared
    small = create_segment("portal-shm-frames-too-small", 64)

    def too_small(env_ids, rings, next_frames):
        hand_over(env_ids, [types.SimpleNamespace(fd=small, shape=r.shape, depth=r.depth) for r in rings], next_frames)

    envs.record_frames_shared = too_small
    with pytest.warns(
        RuntimeWarning, match=r"env 1's server could not map its frame ring \(the frame ring's segment holds 64 bytes"
    ):
        recorder, lengths, _ = run_recorded(envs, str(tmp_path), steps=12, env_indices=(1,), every=1)
    recorder.close()
    os.close(small)
    assert [frame_count(path) for path in recorder.videos] == lengths.lengths[1] == [5, 5]
    assert_nothing_left()


def test_a_server_that_miscounts_its_frames_is_a_protocol_error(tmp_path):
    """The counter of a frame ring moves by one per step of its env, no more: a server that says
    otherwise (a hostile one, say: here the test writes the counter after the server's step) gets
    a ``ServerProtocolError``, not a video of stale slots."""
    import mmap

    envs = portal_shm.make_vec(NULL_ENV, 2, shape=(4, 6, 3), episode_length=50, render_mode="rgb_array")
    recorder = portal_shm.RecordVideo(envs, str(tmp_path), env_indices=[0])
    step = envs.step

    def miscounted(actions):
        result = step(actions)
        (fd,) = frame_rings().values()
        header = mmap.mmap(fd, 64)
        words = np.frombuffer(header, np.uint64, 1)
        words[0] += 5
        del words
        header.close()
        return result

    try:
        recorder.reset(seed=0)
        for _ in range(3):
            recorder.step(recorder.action_space.sample())
        envs.step = miscounted
        with pytest.raises(
            portal_shm.errors.ServerProtocolError, match="env 0's server says it wrote 8 frames .* 2 before"
        ):
            recorder.step(recorder.action_space.sample())
    finally:
        recorder.close()
    assert_nothing_left()


def test_nothing_is_left_after_an_exception_in_the_middle(tmp_path):
    """The recorded env's server dies mid-episode: the step raises, and ``close()`` still writes the
    episode as far as it got, stops ffmpeg and drops the frame ring."""
    envs = portal_shm.make_vec(NULL_ENV, 4, shape=(210, 160, 3), episode_length=50, render_mode="rgb_array")
    recorder = portal_shm.RecordVideo(envs, str(tmp_path), env_indices=[3])
    recorder.reset(seed=0)
    for _ in range(40):  # a chunk of frames handed to ffmpeg, and some not yet
        recorder.step(recorder.action_space.sample())
    assert len(frame_rings()) == 1 and len(ffmpeg_children()) == 1
    (pid,) = [server["pid"] for server in recorder.servers if 3 in server["envs"]]
    os.kill(pid, signal.SIGKILL)
    with pytest.raises(portal_shm.errors.ServerDiedError):
        for _ in range(20):
            recorder.step(recorder.action_space.sample())
    recorder.close()
    assert [frame_count(path) for path in recorder.videos] == [40]
    assert_nothing_left()


def test_a_restarted_server_records_into_the_frame_ring_again(tmp_path):
    """``on_env_failure="restart"``: the fresh server gets the env's frame ring with the next episode
    (its frames numbered on from the wrapper's count), and that episode's video is whole."""
    envs = portal_shm.make_vec(
        NULL_ENV,
        4,
        vector_kwargs={"on_env_failure": "restart"},
        shape=(210, 160, 3),
        episode_length=6,
        render_mode="rgb_array",
    )
    recorder = portal_shm.RecordVideo(envs, str(tmp_path), env_indices=[1])
    recorder.reset(seed=0)
    lengths = EpisodeLengths([1], next_step=True, after_reset=False)
    restarted = []
    for t in range(30):
        if t == 9:  # the second episode's second step
            (pid,) = [server["pid"] for server in recorder.servers if 1 in server["envs"]]
            os.kill(pid, signal.SIGKILL)
        _, _, terminated, truncated, infos = recorder.step(recorder.action_space.sample())
        restarted.append(bool(infos.get("_env_restarted", np.zeros(4, bool))[1]))
        lengths.add(terminated, truncated, infos)
    info_rows = envs._ring.info_len[:, 1].copy()
    renders = recorder.get_attr("renders")[1]
    recorder.close()
    assert restarted.count(True) == 1
    videos = {path: frame_count(path) for path in recorder.videos}
    whole = lengths.lengths[1][2:]  # the episodes after the one the restart cut
    assert len(whole) >= 2 and set(whole) == {6}
    assert [videos[os.path.join(str(tmp_path), f"env1-episode{k}.mp4")] for k in range(2, 2 + len(whole))] == whole
    assert renders == sum(whole) + lengths.current[1]  # the fresh server rendered each step of its episodes
    assert (info_rows == 0).all() and len(videos) >= 4  # its frames came through the frame ring
    assert_nothing_left()


def test_frame_ring_geometry_is_checked_and_both_mappings_see_one_memory():
    from portal_shm.wire.frames import FrameRing

    ring = FrameRing.create("portal-shm-frames-test", (3, 5, 3), 4)
    other = FrameRing(os.dup(ring.fd), [3, 5, 3], 4)
    other.close_fd()
    other.slot(6)[:] = 7
    other.publish(7)
    assert ring.written() == 7 and bytes(ring.frame_bytes_of(2)) == bytes([7]) * 45
    assert bytes(ring.frame_bytes_of(1)) == bytes(45)
    fd = os.dup(ring.fd)
    with pytest.raises(ValueError, match="holds .* bytes"):
        FrameRing(fd, (3, 5, 3), 8)  # a segment smaller than its geometry says: refused, not mapped
    os.close(fd)
    for shape, depth in (((3,), 4), ((3, 5, 3, 1), 4), ((0, 5), 4), ((3, 5), 0)):
        with pytest.raises(ValueError, match="frame ring"):
            FrameRing.create("portal-shm-frames-test", shape, depth)
    ring.close()
    other.close()
    assert_nothing_left()


@pytest.fixture(scope="module")
def hosts(tmp_path_factory):
    from testkit.hosts import EXAMPLE_ENVS, HostProcess, Keys

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
    assert frame_rings() == {}  # the hosts' servers cannot map this process's memory: frames came in infos
    recorder.close()
    written = {path: frame_count(path) for path in recorder.videos}
    for i in (RECORDED, 12):
        expected = expected_videos(str(tmp_path), i, lengths.lengths[i], every=2)
        assert len(expected) >= 2
        assert {path: n for path, n in written.items() if expected.keys() & {path}} == expected
    assert [n for i, n in enumerate(renders) if i not in (RECORDED, 12)] == [0] * 14
    assert renders[RECORDED] > 0 and renders[12] > 0
