"""RecordVideo runs for the tests: random steps under the wrapper with each recorded env's episode
lengths, the frames of a video, and what a recorder holds in this process (frame rings and their
counters, ffmpeg children) and must leave nothing of once closed."""

from __future__ import annotations

import gc
import os

import numpy as np

import portal_shm
from portal_shm.agent.video.record_video import FRAME_KEY

__all__ = [
    "RECORDED",
    "EpisodeLengths",
    "assert_no_frames",
    "assert_nothing_left",
    "ffmpeg_children",
    "frame_count",
    "frame_rings",
    "frames_written",
    "run_recorded",
]

RECORDED = 5  # the env index run_recorded records unless told others


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
    """The frames of the video at ``path`` (needs the video extra: imageio, imageio-ffmpeg)."""
    import imageio.v2 as imageio

    reader = imageio.get_reader(path)
    try:
        return reader.count_frames()
    finally:
        reader.close()


def assert_no_frames(infos: dict) -> None:
    for holder in (infos, infos.get("final_info", {})):
        assert FRAME_KEY not in holder and "_" + FRAME_KEY not in holder, sorted(holder)


def frame_rings() -> dict:
    """RecordVideo's frame rings this process holds open (memfds): name -> one of its descriptors
    (a ring's own, or its mapping's: Python's mmap keeps a copy of the descriptor it maps)."""
    found: dict = {}
    for name in sorted(os.listdir("/proc/self/fd"), key=int):
        try:
            target = os.readlink(f"/proc/self/fd/{name}")
        except OSError:
            continue
        if "portal-shm-frames" in target:
            found.setdefault(target, int(name))
    return found


def frames_written() -> dict:
    """Each frame ring's counter (frames its server wrote into it): what proves that a server, in
    whatever runtime, mapped the agent's ring and wrote into it."""
    import mmap

    counts = {}
    for name, fd in frame_rings().items():
        header = mmap.mmap(fd, 64, prot=mmap.PROT_READ)
        counts[name] = int(np.frombuffer(header, np.uint64, 1)[0])
        header.close()
    return counts


def ffmpeg_children() -> dict:
    """This process's ffmpeg children still running (or not reaped): pid -> (scheduling policy, nice)."""
    found = {}
    for name in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{name}/stat") as handle:
                stat = handle.read()
        except OSError:
            continue
        comm, rest = stat[stat.index("(") + 1 : stat.rindex(")")], stat[stat.rindex(")") + 2 :].split()
        if int(rest[1]) == os.getpid() and "ffmpeg" in comm:
            found[int(name)] = (int(rest[38]), int(rest[16]))  # fields 41 (policy) and 19 (nice) of stat
    return found


def assert_nothing_left() -> None:
    """No frame ring open or mapped in this process, no ffmpeg process left."""
    gc.collect()
    with open("/proc/self/maps") as handle:
        mapped = [line for line in handle if "portal-shm-frames" in line]
    left = (frame_rings(), mapped, ffmpeg_children())
    assert left == ({}, [], {}), f"left (frame rings, mappings, ffmpeg children): {left}"


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
