"""``RecordVideo``: mp4 files of chosen envs of any portal, rendered on their own servers.

gymnasium's vector ``RecordVideo`` renders every sub-env, keeps env 0's frame, counts episodes by
env 0 and encodes inside ``step``. Here only the chosen envs render, each on its own server right
after its step (``record_frames``: the other envs' servers never render), and a thread of the
wrapper hands the frames to ffmpeg while the portal steps on. Each chosen env's own episodes decide
what is recorded.

How frames travel: off the step's hot path, in a frame ring per recorded env where the servers
can map one, else in the envs' infos (``frame_sources`` says how).

Backpressure: an encoder that falls ``depth`` frames behind (a machine without a core to spare for
ffmpeg) makes the next step of that env wait until a slot is free; frames are never dropped, so a
video always has its episode's every frame. ``stalls`` counts the steps that waited (a warning says
so the first time).

Which frames an episode's video holds: one per step of the episode, the frame rendered right after
that step (so the last frame shows the state the episode ended in) and none for the reset that
began it. With ``NextStep`` autoreset the step that resets an ended env belongs to no episode
(it returns the reset's observation): it has no frame, and the next episode's frames start with
the step after it. The frame count therefore equals the episode's length, in every autoreset mode.
"""

from __future__ import annotations

import os
import warnings
import weakref
from dataclasses import dataclass
from typing import Any, Optional, Sequence

import numpy as np
from gymnasium.vector import AutoresetMode, VectorEnv, VectorWrapper

from ...errors import PortalError, ServerProtocolError
from ..contract.base import PortalVectorEnv
from ..contract.checks import check_env_ids
from .encoder import END, Encoder, SharedFrames, Slot, frame_shape
from .frame_sources import FRAME_KEY, FrameRings, take_frames


@dataclass
class _Followed:
    """What the wrapper knows of one chosen env's episodes."""

    episode: int = 0  # the current episode's number
    capturing: bool = False  # what its server was last told (record_frames)
    stepped: bool = False  # the current episode has had a step (a reset then ends it)
    frames: int = 0  # frames of the current episode handed to the encoder
    reset_step_next: bool = False  # its next appearance is a reset's result, not a step's
    shared: Optional[SharedFrames] = None  # its frame ring, once its first frame told the shape


CHUNK_FRAMES = 32  # frames handed to the encoder at once: one thread wake-up per chunk, not per step
# A frame ring holds this many bytes of frames (within the depths below): a few seconds of an Atari
# env's frames, so that the encoder, woken once per chunk, never makes a step wait on a machine
# with a core to spare, and a few big frames (no chunking) for an env rendering 1080p.
FRAME_RING_BYTES = 16 * 1024 * 1024
FRAME_RING_DEPTHS = (4, 256)


def ring_depth(shape: tuple[int, ...]) -> int:
    """Frames a recorded env's frame ring holds for frames of ``shape``."""
    low, high = FRAME_RING_DEPTHS
    return max(low, min(high, FRAME_RING_BYTES // max(1, int(np.prod(shape)))))


def _release(encoder: Encoder, frame_rings: FrameRings) -> None:
    """What a RecordVideo holds outside Python's heap: its encoder (ffmpeg processes) and its
    frame rings' descriptors. Run by ``close``, or at garbage collection or exit without one."""
    try:
        encoder.stop()
    finally:
        frame_rings.close()


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
        frame_rings: give recorded envs frame rings where their servers can map them (a local
            portal's, any backend); False keeps every frame in the infos, the path of portals
            whose servers cannot (env hosts, Ray), e.g. to compare the two.

    The frames of an episode are the ones rendered after each of its steps (see the module
    docstring), so a video has as many frames as its episode has steps. ``videos`` lists the
    files of the episodes recorded so far (``frame_counts`` their frames); they are complete once
    ``close()`` (which flushes and joins the encoder) returns. An episode still running at
    ``close()`` is written as far as it got. The frames never reach the caller: their info entries
    are removed from the infos this wrapper returns. A server restarted by
    ``on_env_failure="restart"``, recycled, or a host reached again records again from the env's
    next episode boundary. ``stalls`` counts the steps that waited for the encoder (see the module
    docstring: frames are never dropped).
    """

    def __init__(
        self,
        env: VectorEnv,
        folder: str | os.PathLike[str],
        env_indices: Sequence[int] = (0,),
        every_n_episodes: int = 1,
        fps: float = 30,
        frame_rings: bool = True,
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
        self.stalls = 0  # steps that waited for the encoder to free a frame ring's slot
        self._followed = {i: _Followed() for i in self.env_indices}
        self._async = getattr(portal, "batch_size", env.num_envs) < env.num_envs
        mode = env.metadata.get("autoreset_mode", AutoresetMode.NEXT_STEP)
        self._next_step = AutoresetMode(mode) is AutoresetMode.NEXT_STEP
        # Frame rings need servers that can map the agent's memory: a local portal's, any backend.
        self._frame_rings = FrameRings(bool(frame_rings and portal.maps_agent_memory))
        self._encoder = Encoder(self.fps)
        self._encoder.start()
        self._finalizer = weakref.finalize(self, _release, self._encoder, self._frame_rings)
        self._chunk: list[tuple[Optional[str], Any]] = []  # frames (and ends of videos) not handed over yet
        self._chunk_frames = CHUNK_FRAMES  # hand the chunk over at this length
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
        self._make_room(None)
        return self._after_step(self.env.step(actions))

    def step_async(self, actions: Any) -> None:
        self._make_room(None)
        self.portal.step_async(actions)

    def step_wait(self, timeout: Optional[float] = None) -> tuple[Any, Any, Any, Any, dict[str, Any]]:
        return self._after_step(self.portal.step_wait(timeout))

    def send(self, actions: Any, env_ids: Any = None) -> None:
        self._make_room(env_ids)
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
            self._encoder.compete()  # what is left is written now, however busy the cores
            try:
                for i in self.env_indices:
                    self._finish(i)  # an episode cut short by close(): written as far as it got
                self._hand_over()
            finally:
                self._finalizer()  # the encoder writes all it holds; then the frame rings go
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
            self._chunk.append((path, END))
            self.videos.append(path)
            self.frame_counts[path] = followed.frames
        followed.frames = 0

    def _end_episode(self, i: int) -> None:
        self._finish(i)
        followed = self._followed[i]
        followed.episode += 1
        followed.stepped = False

    def _capture(self, ids: Sequence[int]) -> None:
        """Tell the servers of ``ids`` whether to capture, where that changes (episode boundaries);
        an env with a frame ring gets it (again) with the word to capture."""
        followed = self._followed
        start = [i for i in ids if self._recorded(followed[i].episode) and not followed[i].capturing]
        stop = [i for i in ids if not self._recorded(followed[i].episode) and followed[i].capturing]
        into_infos = [i for i in start if followed[i].shared is None]
        into_rings = [i for i in start if followed[i].shared is not None]
        if into_infos:
            self.portal.record_frames(into_infos, True)
        if into_rings:
            self._hand_rings(into_rings)
        if stop:
            self.portal.record_frames(stop, False)
        for i in start + stop:
            followed[i].capturing = not followed[i].capturing

    def _hand_rings(self, ids: list[int]) -> None:
        """Capture on in ``ids``, each into its frame ring, one env at a time: a server that cannot
        map its ring refuses it and its env goes on with frames in its infos, for good."""
        for i in ids:
            followed = self._followed[i]
            assert followed.shared is not None
            if not self._frame_rings.hand(self.portal, followed.shared):
                followed.shared = None
                self.portal.record_frames([i], True)

    def _share(self, shapes: dict[int, tuple[int, ...]]) -> None:
        """Give the envs of ``shapes`` (whose first frames came in their infos) frame rings of those
        shapes, handed to their servers now if they capture (else when they next start to)."""
        for i, shape in shapes.items():
            shared = self._frame_rings.create(i, shape, ring_depth(shape))
            self._followed[i].shared = shared
            self._chunk_frames = min(self._chunk_frames, max(1, shared.ring.depth // 4))
        now = [i for i in shapes if self._followed[i].capturing]
        if now:
            self._hand_rings(now)

    def _make_room(self, env_ids: Any) -> None:
        """Before a step of ``env_ids`` (None: all): wait for the encoder where the step's frame
        would overwrite one it has not written yet."""
        full = [f.shared for f in self._followed.values() if f.shared is not None and f.shared.full()]
        if not full:
            return
        stepping = None if env_ids is None else {int(i) for i in np.asarray(env_ids).ravel().tolist()}
        waits = [shared for shared in full if stepping is None or shared.env_index in stepping]
        if not waits:
            return
        self._hand_over()
        if not self.stalls:
            warnings.warn(
                f"RecordVideo: the encoder is {waits[0].ring.depth} frames behind env {waits[0].env_index}; "
                "its steps wait for it (no frame is dropped): ffmpeg, which ran on idle cores only, now "
                "competes for cores at a lower priority",
                RuntimeWarning,
                stacklevel=3,
            )
            self._encoder.compete()
        self.stalls += 1
        for shared in waits:
            shared.wait_room(self._check_encoder)

    def _check_encoder(self) -> None:
        self._raise_encoder_error()
        if not self._encoder.is_alive():
            raise PortalError(f"RecordVideo's encoder stopped; cannot write videos in {self.folder}")

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
        fresh = _fresh_servers(infos)
        ended: list[int] = []
        rearm: list[int] = []
        shapes: dict[int, tuple[int, ...]] = {}
        for i, position in where:
            followed = self._followed[i]
            entry: Any = frames.pop(position, None)
            if followed.shared is not None:
                n = followed.shared.take()
                if n is not None:
                    if entry is not None:
                        raise ServerProtocolError(f"env {i}'s server sent two frames for one step")
                    entry = Slot(followed.shared, n)
            elif entry is not None and self._frame_rings.wanted(i):
                shapes[i] = frame_shape(entry)
            if entry is not None:
                if self._recorded(followed.episode):
                    self._chunk.append((self._path(i, followed.episode), entry))
                    followed.frames += 1
                elif isinstance(entry, Slot):
                    self._chunk.append((None, entry))  # released in its turn by the encoder
            if fresh is not None and fresh[position]:
                followed.capturing = False  # a fresh server (restarted, recycled) records nothing yet
                rearm.append(i)
            if followed.reset_step_next:
                followed.reset_step_next = False
                continue
            followed.stepped = True
            if terminated is not None and (terminated[position] or truncated[position]):
                self._end_episode(i)
                followed.reset_step_next = self._next_step
                ended.append(i)
        if shapes:
            self._share(shapes)
        if ended or rearm:
            self._hand_over()
            self._raise_encoder_error()
            self._capture(ended + [i for i in rearm if i not in ended])
        elif len(self._chunk) >= self._chunk_frames:
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


def _fresh_servers(infos: dict[str, Any]) -> Optional[np.ndarray]:
    """Batch positions whose env answers from a fresh server (``env_restarted``, ``env_recycled``)."""
    marks = [infos[key] for key in ("_env_restarted", "_env_recycled") if key in infos]
    if not marks:
        return None
    fresh: np.ndarray = np.logical_or.reduce(marks)
    return fresh
