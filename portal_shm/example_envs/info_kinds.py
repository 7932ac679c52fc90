"""Infos of every kind a runtime may or may not carry (``INFO_KINDS``): each is a row of the infos
table in docs/concepts/infos.md."""

from __future__ import annotations

import collections
import dataclasses
import enum
import fractions
import threading
from typing import Any, Optional

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from .hostile import own_server


class InfoStatus(enum.IntEnum):
    """An IntEnum as NetHack's ``end_status`` (``nle.StepStatus``) is one."""

    RUNNING = 0
    DONE = 1


InfoPoint = collections.namedtuple("InfoPoint", "x y")


@dataclasses.dataclass
class InfoStats:
    score: int
    name: str


def info_value(kind: str, t: int) -> Any:
    """A value of ``kind`` (one of ``INFO_KINDS``) that changes with ``t``: each is a row of the
    infos table in docs/concepts/infos.md (what each runtime carries)."""
    if kind == "plain":
        return {"n": t, "f": t / 2, "b": t % 2 == 0, "s": f"t{t}", "by": bytes([t % 256]), "none": None,
                "list": [t, "x", [1.5]], "tuple": (t, ("a", b"b")), "dict": {"a": t, "b": [t]}}  # fmt: skip
    if kind == "numpy":
        return {"f32": np.float32(t), "i8": np.int8(-t), "c": np.complex64(t + 1j), "bool": np.bool_(t % 2),
                "arr": np.arange(t + 3, dtype=np.int16).reshape(1, -1), "str": np.array(["a", "bc"]),
                "in_list": [np.float64(t), np.zeros(2, np.uint8)]}  # fmt: skip
    if kind == "batched_subclass":  # subclasses that batching turns into their base anyway
        return collections.OrderedDict(n=t, m=np.ma.masked_array([t, 1], mask=[False, True]))
    values = {
        "intenum": lambda: InfoStatus(t % 2),
        "namedtuple": lambda: InfoPoint(t, -t),
        "set": lambda: {t, t + 1},
        "frozenset": lambda: frozenset([t, "x"]),
        "dataclass": lambda: InfoStats(t, "me"),
        "object_array": lambda: np.array([t, "x", None], dtype=object),
        "datetime64": lambda: np.datetime64(t, "s"),
        "datetime64_array": lambda: np.arange(t, t + 2).astype("datetime64[D]"),
        # (a timedelta64 scalar is an np.number: gymnasium's batching fails on it, not inside a list)
        "timedelta64": lambda: [np.timedelta64(t, "ms"), np.arange(2).astype("m8[ms]")],
        "subclass_in_list": lambda: [collections.OrderedDict(n=t)],
        "object": lambda: fractions.Fraction(t, 3),  # any other picklable object
        "unpicklable": lambda: threading.Lock(),
    }
    return values[kind]()


INFO_KINDS = (
    "plain", "numpy", "batched_subclass", "intenum", "namedtuple", "set", "frozenset", "dataclass", "object_array",
    "datetime64", "datetime64_array", "timedelta64", "subclass_in_list", "object", "unpicklable",
)  # fmt: skip


class InfoKindsEnv(gym.Env):
    """Returns in its infos a value of ``kind`` (``INFO_KINDS``), at every reset and step, under
    ``info["value"]`` and nested (``info["stats"]["when"]``); episodes of ``episode_length`` steps,
    so that autoresets carry it in ``final_info`` too.

    ``pickling``: a hostile env that makes its server pickle such values whatever the agent said (it
    runs in the server's process), as if its runtime were no trust boundary."""

    def __init__(self, kind: str = "plain", episode_length: int = 3, pickling: bool = False):
        self.observation_space = spaces.Box(-1.0, 1.0, (1,), np.float32)
        self.action_space = spaces.Discrete(2)
        self.kind, self.episode_length, self.pickling, self.t = kind, int(episode_length), bool(pickling), 0

    def _info(self) -> dict:
        if self.pickling:
            from portal_shm.wire.info_codec import PICKLE, InfoCodec

            own_server().writer.info_codec = InfoCodec(PICKLE)
        return {"value": info_value(self.kind, self.t), "stats": {"when": info_value(self.kind, self.t + 1)}}

    def reset(self, *, seed: Optional[int] = None, options: Optional[dict] = None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(1, np.float32), self._info()

    def step(self, action):
        self.t += 1
        return np.zeros(1, np.float32), float(self.t), False, self.t >= self.episode_length, self._info()
