"""``RecordVideo``: mp4 files of chosen envs of any portal, rendered on their own servers.

gymnasium's vector ``RecordVideo`` renders every sub-env, keeps env 0's frame, counts episodes by
env 0 and encodes inside ``step``. Here only the chosen envs render, each on its own server right
after its step (``record_frames``: the other envs' servers never render), the frames come back in
the envs' infos (a frame too big for the ring row travels in the step's control message, never in
the ring's observation slots), and a thread of the wrapper hands them to ffmpeg while the portal
steps on. Each chosen env's own episodes decide what is recorded.

Which frames an episode's video holds: one per step of the episode, the frame rendered right after
that step (so the last frame shows the state the episode ended in) and none for the reset that
began it. With ``NextStep`` autoreset the step that resets an ended env belongs to no episode
(it returns the reset's observation): it has no frame, and the next episode's frames start with
the step after it. The frame count therefore equals the episode's length, in every autoreset mode.
"""

from __future__ import annotations

import os
import queue
import subprocess
import threading
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Optional, Sequence

import numpy as np
from gymnasium.vector import AutoresetMode, VectorEnv, VectorWrapper

from ..errors import PortalError, ServerProtocolError
from .contract import PortalVectorEnv, check_env_ids

FRAME_KEY = "_portal_frame"  # what env servers put frames under (portal_shm/server/recording.py)
FRAME_MASK = "_" + FRAME_KEY
_END = object()  # an episode's last frame was queued: close its file


@dataclass
class _Followed:
    """What the wrapper knows of one chosen env's episodes."""

    episode: int = 0  # the current episode's number
    capturing: bool = False  # what its server was last told (record_frames)
    stepped: bool = False  # the current episode has had a step (a reset then ends it)
    frames: int = 0  # frames of the current episode handed to the encoder
    reset_step_next: bool = False  # its next appearance is a reset's result, not a step's


# H.264 in yuv420p (what browsers play) at x264's fastest preset on one thread, chroma subsampled by
# picking pixels: ffmpeg's work per frame is what recording costs the envs' cores, and the slower
# settings' smaller files and finer colours are not worth it for a look at an env.
ENCODER_PARAMS = ["-preset", "ultrafast", "-crf", "23", "-threads", "1", "-sws_flags", "neighbor"]
ENCODER_NICE = 10  # ffmpeg yields to the envs on a busy machine, yet keeps ~10 % of a contended core
CHUNK_FRAMES = 32  # frames handed to the encoder at once: one thread wake-up per chunk, not per step
BACKLOG_CHUNKS = 16  # chunks handed over and not yet written; then the step waits (memory stays bounded)


def _lower_priority(pid: int) -> None:
    """Lower an ffmpeg process's priority (only ffmpeg's: the encoder thread holds the agent's GIL
    now and then, and a starved holder would stall the agent's own thread)."""
    try:
        os.setpriority(os.PRIO_PROCESS, pid, ENCODER_NICE)
    except (AttributeError, OSError):
        pass


class _Video:
    """One mp4 being written: an ffmpeg process reading raw rgb24 frames of one size on its stdin."""

    def __init__(self, path: str, shape: tuple[int, ...], fps: float) -> None:
        import imageio_ffmpeg

        height, width = shape[:2]
        command = [imageio_ffmpeg.get_ffmpeg_exe(), "-y", "-loglevel", "error", "-f", "rawvideo", "-pix_fmt", "rgb24",
                   "-s", f"{width}x{height}", "-r", str(Fraction(fps).limit_denominator(1001)), "-i", "-", "-an",
                   "-vcodec", "libx264", "-pix_fmt", "yuv420p", *ENCODER_PARAMS, path]  # fmt: skip
        self.path, self.shape = path, shape
        self.process = subprocess.Popen(command, stdin=subprocess.PIPE, stderr=subprocess.PIPE)
        _lower_priority(self.process.pid)

    def write(self, data: bytes, shape: tuple[int, ...]) -> None:
        if shape != self.shape:
            raise ValueError(f"a frame of shape {shape} in {self.path}, whose frames are {self.shape}")
        stdin = self.process.stdin
        assert stdin is not None
        try:
            stdin.write(data)
        except BrokenPipeError:
            self.close()  # raises what ffmpeg said

    def close(self) -> None:
        stdin = self.process.stdin
        assert stdin is not None
        try:
            stdin.close()
        except BrokenPipeError:
            pass
        stderr = self.process.stderr
        said = stderr.read().decode(errors="replace").strip() if stderr is not None else ""
        if self.process.wait() != 0:
            raise RuntimeError(f"ffmpeg failed writing {self.path} (exit {self.process.returncode}): {said[-500:]}")


class _Encoder(threading.Thread):
    """Writes frames to mp4 files in arrival order, off the step path: it decodes each frame's info
    entry and pipes the bytes to one ffmpeg process per open video (at a lower priority).

    Frames come in chunks (``put``): waking a thread for every step's frame costs the agent's
    critical path more than the frame itself. A backlog of ``BACKLOG_CHUNKS`` (an encoder starved of
    cores on a saturated machine) makes ``put`` wait rather than hold frames without bound."""

    def __init__(self, fps: float) -> None:
        super().__init__(name="portal-shm RecordVideo encoder", daemon=True)
        self.fps = fps
        self.chunks: queue.SimpleQueue[Optional[list[tuple[str, Any]]]] = queue.SimpleQueue()
        self.room = threading.BoundedSemaphore(BACKLOG_CHUNKS)
        self.error: Optional[BaseException] = None

    def put(self, chunk: list[tuple[str, Any]]) -> None:
        self.room.acquire()
        self.chunks.put(chunk)

    def stop(self) -> None:
        """Write everything handed over, close the files and end the thread."""
        self.chunks.put(None)
        self.join()

    def run(self) -> None:
        videos: dict[str, _Video] = {}
        while True:
            chunk = self.chunks.get()
            if chunk is None:
                break
            for path, entry in chunk:
                self._write(videos, path, entry)
            self.room.release()
        for video in videos.values():
            try:
                video.close()
            except Exception as exc:
                self.error = self.error or exc

    def _write(self, videos: dict[str, _Video], path: str, entry: Any) -> None:
        try:
            if entry is _END:
                video = videos.pop(path, None)
                if video is not None:
                    video.close()
                return
            data, shape = _frame_bytes(entry)
            video = videos.get(path)
            if video is None:
                video = videos[path] = _Video(path, shape, self.fps)
            video.write(data, shape)
        except Exception as exc:  # the next RecordVideo call (or close) raises it
            self.error = self.error or exc
            videos.pop(path, None)


def _frame_bytes(entry: Any) -> tuple[bytes, tuple[int, ...]]:
    """An (H, W, 3) rgb24 frame of even sides from its info entry (shape and bytes, made on the
    env's server), as H.264 in yuv420p takes it: grey or RGBA converted, an odd side padded."""
    try:
        shape, data = tuple(int(d) for d in entry["shape"]), entry["data"]
        if not isinstance(data, bytes) or len(shape) not in (2, 3) or int(np.prod(shape)) != len(data):
            raise ValueError(f"{len(data)} bytes for shape {shape}")
        if len(shape) == 3 and shape[2] not in (1, 3, 4):
            raise ValueError(f"{shape[2]} channels")
    except (KeyError, TypeError, ValueError) as exc:
        raise ServerProtocolError(f"an env server sent a malformed frame ({exc})") from None
    if len(shape) == 3 and shape[2] == 3 and shape[0] % 2 == 0 and shape[1] % 2 == 0:
        return data, shape  # the usual case: the server's bytes go to ffmpeg as they came
    frame: Any = np.frombuffer(data, np.uint8).reshape(shape)
    if frame.ndim == 2:
        frame = frame[:, :, None]
    if frame.shape[2] == 1:
        frame = np.repeat(frame, 3, axis=2)
    elif frame.shape[2] == 4:
        frame = frame[:, :, :3]
    height, width = frame.shape[:2]
    if height % 2 or width % 2:
        frame = np.pad(frame, ((0, height % 2), (0, width % 2), (0, 0)), mode="edge")
    return np.ascontiguousarray(frame).tobytes(), frame.shape


def take_frames(infos: dict[str, Any]) -> dict[int, dict[str, Any]]:
    """Remove the frames (and their masks) from a batch's infos: batch position -> frame entry.

    A frame sits at the top level, or in ``final_info`` for the step that ended an episode with
    ``SameStep`` autoreset (the server resets the env in that same step)."""
    found: dict[int, dict[str, Any]] = {}
    for holder in (infos, infos.get("final_info")):
        if not isinstance(holder, dict) or FRAME_KEY not in holder:
            continue
        entries, mask = holder.pop(FRAME_KEY), holder.pop(FRAME_MASK, None)
        if not isinstance(entries, dict) or mask is None:
            raise ServerProtocolError("an env server sent frames that are not one entry per env")
        for position in np.flatnonzero(mask).tolist():
            found[position] = {key: entries[key][position] for key in ("shape", "data") if key in entries}
    return found


class RecordVideo(VectorWrapper):
    """Record mp4 videos of chosen envs of a portal: ``folder/env{i}-episode{k}.mp4``.

    Args:
        env: a portal of any kind (``make_vec``, ``VectorPortal``, remote, Ray; wrapped or not),
            lockstep or async batches, made with ``render_mode="rgb_array"``.
        folder: where the videos go (made if missing).
        env_indices: the envs to record; only these render, each on its own server.
        every_n_episodes: record each chosen env's episodes 0, K, 2K, ... (its own episodes: an
            episode ends with its ``terminated`` or ``truncated``, or when ``reset`` cuts it).
        fps: the videos' frame rate.

    The frames of an episode are the ones rendered after each of its steps (see the module
    docstring), so a video has as many frames as its episode has steps. ``videos`` lists the
    files of the episodes recorded so far (``frame_counts`` their frames); they are complete once ``close()`` (which flushes
    and joins the encoder) returns. An episode still running at ``close()`` is written as far
    as it got. The frames never reach the caller: their info entries are removed from the
    infos this wrapper returns. A server restarted by ``on_env_failure="restart"`` (or a host
    reached again) records again from the env's next episode boundary.
    """

    def __init__(
        self,
        env: VectorEnv,
        folder: str | os.PathLike[str],
        env_indices: Sequence[int] = (0,),
        every_n_episodes: int = 1,
        fps: float = 30,
    ) -> None:
        super().__init__(env)
        portal = env.unwrapped
        if not isinstance(portal, PortalVectorEnv):
            raise TypeError(
                f"RecordVideo records envs of a portal (make_vec, VectorPortal, RemoteVectorPortal), not "
                f"{type(portal).__name__}: for gymnasium's own vector envs use gymnasium.wrappers.vector.RecordVideo"
            )
        if int(every_n_episodes) < 1:
            raise ValueError(f"every_n_episodes must be at least 1, got {every_n_episodes}")
        if env.render_mode not in (None, "rgb_array"):
            raise ValueError(
                f"RecordVideo needs frames from render_mode='rgb_array', the portal's envs render {env.render_mode!r}: "
                "make them with make_vec(..., render_mode='rgb_array')"
            )
        try:
            import imageio_ffmpeg

            imageio_ffmpeg.get_ffmpeg_exe()  # its own binary, or one on PATH / $IMAGEIO_FFMPEG_EXE
        except (ImportError, RuntimeError) as exc:
            raise PortalError(
                f"RecordVideo writes mp4 files through imageio-ffmpeg ({exc}): pip install 'portal-shm[video]'"
            ) from None
        self.portal = portal
        self.folder = os.fspath(folder)
        os.makedirs(self.folder, exist_ok=True)
        self.env_indices = check_env_ids(env_indices, env.num_envs)
        self.every_n_episodes = int(every_n_episodes)
        self.fps = float(fps)
        self.videos: list[str] = []
        self.frame_counts: dict[str, int] = {}  # video -> frames handed to the encoder for it
        self._followed = {i: _Followed() for i in self.env_indices}
        self._async = getattr(portal, "batch_size", env.num_envs) < env.num_envs
        mode = env.metadata.get("autoreset_mode", AutoresetMode.NEXT_STEP)
        self._next_step = AutoresetMode(mode) is AutoresetMode.NEXT_STEP
        self._encoder = _Encoder(self.fps)
        self._encoder.start()
        self._chunk: list[tuple[str, Any]] = []  # frames (and ends of videos) not handed over yet
        self._closed = False

    # -- the vector API, with frames taken out -------------------------------------------------
    def reset(
        self, *, seed: int | list[int | None] | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        """Reset (cutting any episode of a chosen env that had steps), frames on for recorded episodes."""
        self._before_reset(options)
        obs, infos = self.env.reset(seed=seed, options=options)  # type: ignore[arg-type]
        if self._async:  # the first batch of reset results
            self._observe(infos, None, None)
        return obs, infos

    def reset_async(self, seed: int | list[int | None] | None = None, options: dict[str, Any] | None = None) -> None:
        self._before_reset(options)
        self.portal.reset_async(seed=seed, options=options)

    def reset_wait(self, timeout: Optional[float] = None) -> tuple[Any, dict[str, Any]]:
        obs, infos = self.portal.reset_wait(timeout)
        if self._async:
            self._observe(infos, None, None)
        return obs, infos

    def async_reset(self, seed: int | list[int | None] | None = None, options: dict[str, Any] | None = None) -> None:
        """envpool's ``async_reset``; ``recv()`` hands out the reset results."""
        self._before_reset(options)
        self.portal.async_reset(seed=seed, options=options)

    def step(self, actions: Any) -> tuple[Any, Any, Any, Any, dict[str, Any]]:
        return self._after_step(self.env.step(actions))

    def step_async(self, actions: Any) -> None:
        self.portal.step_async(actions)

    def step_wait(self, timeout: Optional[float] = None) -> tuple[Any, Any, Any, Any, dict[str, Any]]:
        return self._after_step(self.portal.step_wait(timeout))

    def send(self, actions: Any, env_ids: Any = None) -> None:
        self.portal.send(actions, env_ids)

    def recv(self, timeout: Optional[float] = None) -> tuple[Any, Any, Any, Any, dict[str, Any]]:
        return self._after_step(self.portal.recv(timeout))

    def __getattr__(self, name: str) -> Any:
        """The portal's other calls (``call``, ``call_envs``, ``servers``, ``stats`` ...) as they are."""
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self.env, name)

    def close(self, **kwargs: Any) -> None:
        """Close the portal, then write what the encoder still holds and wait for it."""
        if self._closed:
            return
        self._closed = True
        try:
            self.env.close(**kwargs)
        finally:
            for i in self.env_indices:
                self._finish(i)  # an episode cut short by close(): written as far as it got
            self._hand_over()
            self._encoder.stop()
        self._raise_encoder_error()

    # -- following the chosen envs' episodes ------------------------------------------------------
    def _recorded(self, episode: int) -> bool:
        return episode % self.every_n_episodes == 0

    def _path(self, i: int, episode: int) -> str:
        return os.path.join(self.folder, f"env{i}-episode{episode}.mp4")

    def _finish(self, i: int) -> None:
        """The current episode of env ``i`` is over: close its file (if it got frames)."""
        followed = self._followed[i]
        if followed.frames:
            path = self._path(i, followed.episode)
            self._chunk.append((path, _END))
            self.videos.append(path)
            self.frame_counts[path] = followed.frames
        followed.frames = 0

    def _end_episode(self, i: int) -> None:
        self._finish(i)
        followed = self._followed[i]
        followed.episode += 1
        followed.stepped = False

    def _capture(self, ids: Sequence[int]) -> None:
        """Tell the servers of ``ids`` whether to capture, where that changes (episode boundaries)."""
        start = [i for i in ids if self._recorded(self._followed[i].episode) and not self._followed[i].capturing]
        stop = [i for i in ids if not self._recorded(self._followed[i].episode) and self._followed[i].capturing]
        if start:
            self.portal.record_frames(start, True)
        if stop:
            self.portal.record_frames(stop, False)
        for i in start + stop:
            self._followed[i].capturing = not self._followed[i].capturing

    def _before_reset(self, options: Optional[dict[str, Any]]) -> None:
        self._raise_encoder_error()
        mask = None if options is None else options.get("reset_mask")
        ids = [i for i in self.env_indices if mask is None or bool(mask[i])]
        for i in ids:
            followed = self._followed[i]
            if followed.stepped:
                self._end_episode(i)
            followed.reset_step_next = self._async  # async batches hand reset results out with recv
        self._hand_over()
        self._capture(ids)

    def _observe(self, infos: dict[str, Any], terminated: Any, truncated: Any) -> None:
        """Queue the chosen envs' frames of this batch, and follow their episodes."""
        frames = take_frames(infos) if FRAME_KEY in infos or "final_info" in infos else {}
        batch_ids = infos.get("env_id")
        if batch_ids is None:
            where = [(i, i) for i in self.env_indices]
        else:
            followed_ids = self._followed
            where = [(int(i), p) for p, i in enumerate(batch_ids.tolist()) if int(i) in followed_ids]
        ended: list[int] = []
        for i, position in where:
            followed = self._followed[i]
            entry = frames.pop(position, None)
            if entry is not None and self._recorded(followed.episode):
                self._chunk.append((self._path(i, followed.episode), entry))
                followed.frames += 1
            if followed.reset_step_next:
                followed.reset_step_next = False
                continue
            followed.stepped = True
            if terminated is not None and (terminated[position] or truncated[position]):
                self._end_episode(i)
                followed.reset_step_next = self._next_step
                ended.append(i)
        if ended:
            self._hand_over()
            self._raise_encoder_error()
            self._capture(ended)
        elif len(self._chunk) >= CHUNK_FRAMES:
            self._hand_over()

    def _after_step(self, result: Any) -> tuple[Any, Any, Any, Any, dict[str, Any]]:
        obs, reward, terminated, truncated, infos = result
        self._observe(infos, terminated, truncated)
        return obs, reward, terminated, truncated, infos

    def _hand_over(self) -> None:
        if self._chunk:
            self._encoder.put(self._chunk)
            self._chunk = []

    def _raise_encoder_error(self) -> None:
        error = self._encoder.error
        if error is not None:
            self._encoder.error = None
            raise PortalError(f"RecordVideo could not write a video in {self.folder}: {error}") from error
