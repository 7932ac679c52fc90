"""The encoder side of ``RecordVideo``: frames to mp4 files through ffmpeg, off the step path.

A thread of the agent (``Encoder``) takes chunks of frames in arrival order and pipes each one to
the ffmpeg process of its video: from its frame ring's slot in shared memory (``Slot``, written
straight into the pipe, then released to the env's server) or decoded from its info entry.
"""

from __future__ import annotations

import fcntl
import functools
import os
import queue
import subprocess
import threading
from fractions import Fraction
from typing import Any, Callable, Optional, Union

import numpy as np

from ...errors import ServerProtocolError
from ...wire.frames import FrameRing

END = object()  # an episode's last frame was queued: close its file

# H.264 in yuv420p (what browsers play) at x264's fastest preset on one thread, chroma subsampled by
# picking pixels: ffmpeg's work per frame is what recording costs the envs' cores, and the slower
# settings' smaller files and finer colours are not worth it for a look at an env.
ENCODER_PARAMS = ["-preset", "ultrafast", "-crf", "23", "-threads", "1", "-sws_flags", "neighbor"]
ENCODER_NICE = 10  # ffmpeg's priority once it has to compete for cores (see ``_set_priority``)
BACKLOG_CHUNKS = 16  # chunks handed over and not yet written; then the step waits (memory stays bounded)
PIPE_BYTES = 1024 * 1024  # ffmpeg's stdin: a chunk's frames go in with few wake-ups of either side


class SharedFrames:
    """A recorded env's frame ring as the agent follows it: the frames its server has written that
    the wrapper took (``seen``) and those the encoder is done with (``released``). Frame ``n``'s
    slot may be written again once ``released > n``: that is what a step waits for when full."""

    def __init__(self, ring: FrameRing, env_index: int) -> None:
        self.ring, self.env_index = ring, env_index
        self.seen = 0
        self.released = 0
        self.changed = threading.Condition()

    def take(self) -> Optional[int]:
        """The number of the frame the env's last step wrote, None when it wrote none."""
        written = self.ring.written()
        if written == self.seen:
            return None
        if written != self.seen + 1:
            raise ServerProtocolError(
                f"env {self.env_index}'s server says it wrote {written} frames into its frame ring, "
                f"{self.seen} before this step: a step renders one"
            )
        self.seen = written
        return written - 1

    def release(self, n: int) -> None:
        """The encoder is done with frame ``n`` (and every frame before it)."""
        with self.changed:
            self.released = n + 1
            self.changed.notify_all()

    def full(self) -> bool:
        """The env's next frame would go into a slot the encoder still has to write."""
        return self.seen - self.released >= self.ring.depth

    def wait_room(self, check: Callable[[], None]) -> None:
        """Wait until the next frame has a free slot; ``check`` raises when it never will."""
        with self.changed:
            while self.full():
                check()
                self.changed.wait(0.5)


class Slot:
    """Frame ``n`` of a frame ring, handed to the encoder (which releases it once written)."""

    __slots__ = ("shared", "n")

    def __init__(self, shared: SharedFrames, n: int) -> None:
        self.shared, self.n = shared, n


def _set_priority(pid: int, compete: bool) -> None:
    """Put an ffmpeg process at ``SCHED_IDLE`` (Linux), or at nice ``ENCODER_NICE`` to ``compete``.

    Idle: ffmpeg runs only on a core nothing else wants, and a server or the agent that wakes takes
    the core back at once. A niced ffmpeg keeps a fair share of a contended core instead, and in
    lockstep an env server that wakes (or yields while it spins) behind it can wait a time slice:
    with every step waiting for its slowest server, that costs more than ffmpeg's own CPU (README,
    "Recording chosen envs"). But an idle ffmpeg starves on a machine whose cores other work keeps
    busy: once steps have waited for it (and at ``close``), ffmpeg competes. Leaving SCHED_IDLE
    takes a privilege (``_may_leave_idle``): without it ffmpeg competes from the start, niced.
    Only ffmpeg's priority changes, never the encoder thread's: it holds the agent's GIL now and
    then, and a starved holder would stall the agent's own thread."""
    try:
        os.setpriority(os.PRIO_PROCESS, pid, ENCODER_NICE)  # also where it lands on leaving SCHED_IDLE
        if compete:
            os.sched_setscheduler(pid, os.SCHED_OTHER, os.sched_param(0))
        elif _may_leave_idle():
            os.sched_setscheduler(pid, os.SCHED_IDLE, os.sched_param(0))
    except (AttributeError, OSError):
        pass


@functools.lru_cache(maxsize=None)
def _may_leave_idle() -> bool:
    """Whether this process may take an ffmpeg of its own out of SCHED_IDLE again: with
    CAP_SYS_NICE (root outside a container, not Docker's default capabilities) or an RLIMIT_NICE
    that allows nice ``ENCODER_NICE`` (the kernel's rule for leaving SCHED_IDLE)."""
    if not hasattr(os, "SCHED_IDLE"):
        return False
    try:
        import resource

        if resource.getrlimit(resource.RLIMIT_NICE)[0] >= 20 - ENCODER_NICE:
            return True
    except (ImportError, AttributeError, OSError, ValueError):
        pass
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("CapEff:"):
                    return bool(int(line.split()[1], 16) >> 23 & 1)  # CAP_SYS_NICE is capability 23
    except (OSError, ValueError, IndexError):
        pass
    return False


class Video:
    """One mp4 being written: an ffmpeg process reading raw rgb24 frames of one size on its stdin."""

    def __init__(self, path: str, shape: tuple[int, ...], fps: float, compete: bool) -> None:
        import imageio_ffmpeg

        height, width = shape[:2]
        command = [imageio_ffmpeg.get_ffmpeg_exe(), "-y", "-loglevel", "error", "-f", "rawvideo", "-pix_fmt", "rgb24",
                   "-s", f"{width}x{height}", "-r", str(Fraction(fps).limit_denominator(1001)), "-i", "-", "-an",
                   "-vcodec", "libx264", "-pix_fmt", "yuv420p", *ENCODER_PARAMS, path]  # fmt: skip
        self.path, self.shape = path, shape
        self.process = subprocess.Popen(command, stdin=subprocess.PIPE, stderr=subprocess.PIPE)
        _set_priority(self.process.pid, compete)
        stdin = self.process.stdin
        assert stdin is not None
        self.fd = stdin.fileno()
        try:  # (Linux) a pipe that holds a chunk's frames, where the default holds less than one
            fcntl.fcntl(self.fd, getattr(fcntl, "F_SETPIPE_SZ", 1031), PIPE_BYTES)
        except OSError:
            pass

    def write(self, data: Union[bytes, memoryview], shape: tuple[int, ...]) -> None:
        """Write one frame (``data`` may be a view of a frame ring's slot: it is copied into the pipe
        and nowhere else)."""
        if shape != self.shape:
            raise ValueError(f"a frame of shape {shape} in {self.path}, whose frames are {self.shape}")
        view = memoryview(data)
        try:
            while view:
                view = view[os.write(self.fd, view) :]
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
        said = ""
        if stderr is not None:
            with stderr:
                said = stderr.read().decode(errors="replace").strip()
        if self.process.wait() != 0:
            raise RuntimeError(f"ffmpeg failed writing {self.path} (exit {self.process.returncode}): {said[-500:]}")

    def kill(self) -> None:
        """Stop ffmpeg without finishing the file (the agent is going away)."""
        self.process.kill()
        self.process.wait()
        for pipe in (self.process.stdin, self.process.stderr):
            try:
                if pipe is not None:
                    pipe.close()
            except OSError:
                pass


class Encoder(threading.Thread):
    """Writes frames to mp4 files in arrival order, off the step path: it pipes each frame's bytes
    (from its frame ring's slot, or decoded from its info entry) to one ffmpeg process per open
    video (at a lower priority), and releases each slot once its bytes are in the pipe.

    Frames come in chunks (``put``): waking a thread for every step's frame costs the agent's
    critical path more than the frame itself. A backlog of ``BACKLOG_CHUNKS`` (an encoder starved of
    cores on a saturated machine) makes ``put`` wait rather than hold frames without bound."""

    def __init__(self, fps: float) -> None:
        super().__init__(name="portal-shm RecordVideo encoder", daemon=True)
        self.fps = fps
        self.chunks: queue.SimpleQueue[Optional[list[tuple[Optional[str], Any]]]] = queue.SimpleQueue()
        self.room = threading.BoundedSemaphore(BACKLOG_CHUNKS)
        self.error: Optional[BaseException] = None
        self.videos: dict[str, Video] = {}  # open videos (by the thread; ``compete`` reads it under ``lock``)
        self.lock = threading.Lock()
        self.competing = False  # ffmpeg competes for cores (``_set_priority``)

    def compete(self) -> None:
        """ffmpeg competes for cores from now on: steps have waited for it."""
        with self.lock:
            if self.competing:
                return
            self.competing = True
            for video in self.videos.values():
                _set_priority(video.process.pid, True)

    def put(self, chunk: list[tuple[Optional[str], Any]]) -> None:
        self.room.acquire()
        self.chunks.put(chunk)

    def stop(self) -> None:
        """Write everything handed over, close the files and end the thread."""
        if self.is_alive():
            self.chunks.put(None)
            self.join()

    def run(self) -> None:
        while True:
            chunk = self.chunks.get()
            if chunk is None:
                break
            for path, entry in chunk:
                self._write(path, entry)
            self.room.release()
        for path in list(self.videos):
            try:
                self._drop(path).close()
            except Exception as exc:
                self.error = self.error or exc

    def _write(self, path: Optional[str], entry: Any) -> None:
        """Write one entry of a chunk; ``path`` None: a frame of no recorded episode, only released."""
        try:
            if entry is END:
                if path in self.videos:
                    self._drop(path).close()
                return
            data, shape = slot_bytes(entry) if isinstance(entry, Slot) else frame_bytes(entry)
            if path is None:
                return
            video = self.videos.get(path)
            if video is None:
                with self.lock:
                    video = self.videos[path] = Video(path, shape, self.fps, self.competing)
            video.write(data, shape)
        except Exception as exc:  # the next RecordVideo call (or close) raises it
            self.error = self.error or exc
            if path in self.videos:
                self._drop(path).kill()  # the file is lost either way: its ffmpeg goes now
        finally:
            if isinstance(entry, Slot):
                entry.shared.release(entry.n)

    def _drop(self, path: Optional[str]) -> Video:
        with self.lock:
            return self.videos.pop(path)  # type: ignore[arg-type]


def frame_shape(entry: Any) -> tuple[int, ...]:
    """The shape of a frame's info entry (made on the env's server), checked: (H, W) or (H, W, C)."""
    try:
        shape = tuple(int(d) for d in entry["shape"])
        if len(shape) not in (2, 3) or not all(0 < d < 1 << 16 for d in shape):
            raise ValueError(f"shape {shape}")
        if len(shape) == 3 and shape[2] not in (1, 3, 4):
            raise ValueError(f"{shape[2]} channels")
    except (KeyError, TypeError, ValueError) as exc:
        raise ServerProtocolError(f"an env server sent a malformed frame ({exc})") from None
    return shape


def frame_bytes(entry: Any) -> tuple[Union[bytes, memoryview], tuple[int, ...]]:
    """An (H, W, 3) rgb24 frame of even sides from its info entry, as H.264 in yuv420p takes it."""
    shape = frame_shape(entry)
    data = entry.get("data")
    if not isinstance(data, bytes) or int(np.prod(shape)) != len(data):
        size = len(data) if isinstance(data, bytes) else type(data).__name__
        raise ServerProtocolError(f"an env server sent a malformed frame ({size} bytes for shape {shape})")
    return even_rgb(data, shape)


def slot_bytes(entry: Slot) -> tuple[Union[bytes, memoryview], tuple[int, ...]]:
    """The same from a frame ring's slot: the slot's own bytes in the usual case (no copy)."""
    ring = entry.shared.ring
    return even_rgb(ring.frame_bytes_of(entry.n), ring.shape)


def even_rgb(
    data: Union[bytes, memoryview], shape: tuple[int, ...]
) -> tuple[Union[bytes, memoryview], tuple[int, ...]]:
    """Frame bytes of ``shape`` as rgb24 with even sides: grey or RGBA converted, an odd side padded."""
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
