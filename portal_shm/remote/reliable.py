"""Numbered messages that survive a dropped connection: none lost, none delivered twice.

ZeroMQ reconnects a broken TCP connection by itself, but what was in flight on the old one is
gone. So every message of a session (not the heartbeats) carries ``seq``, its sender's running
number, and ``ack``, the highest number its sender received without a gap. Each side keeps what
the other has not acknowledged and sends it again when a heartbeat shows the other side stuck
behind; the receiver drops numbers it already has. A blip of a second or two then costs a resend,
never a lost or repeated step.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any


class Sequencer:
    """One direction's numbering and the other's acknowledgements, for one session."""

    def __init__(self) -> None:
        self.sent = 0  # the last number this side gave a message
        self.received = 0  # the highest number received from the other side without a gap
        self.peer_ack = 0  # the highest of ours the other side has acknowledged
        self._unacked: OrderedDict[int, Any] = OrderedDict()
        self.unacked_bytes = 0  # the bytes of those messages: what the other side makes this side hold
        self._lock = threading.Lock()  # the host resends from its router thread

    def stamp(self, header: dict[str, Any]) -> dict[str, Any]:
        """``header`` numbered as this side's next message, acknowledging what arrived."""
        with self._lock:
            self.sent += 1
            return {**header, "seq": self.sent, "ack": self.received}

    def keep(self, seq: int, frames: list[Any]) -> None:
        with self._lock:
            if seq > self.peer_ack:
                self._unacked[seq] = frames
                self.unacked_bytes += sum(len(frame) for frame in frames)

    def acknowledged(self, ack: object) -> None:
        """The other side has everything up to ``ack``: forget it."""
        if not isinstance(ack, int) or ack <= self.peer_ack or ack > self.sent:
            return
        with self._lock:
            self.peer_ack = ack
            while self._unacked and next(iter(self._unacked)) <= ack:
                self.unacked_bytes -= sum(len(frame) for frame in self._unacked.popitem(last=False)[1])

    def accept(self, seq: object) -> bool:
        """Whether a message numbered ``seq`` is the next one (True) or a duplicate or out of order."""
        if isinstance(seq, int) and seq == self.received + 1:
            self.received = seq
            return True
        return False

    def forget(self) -> None:
        """Drop every kept message (the session is dropped: nothing will be resent)."""
        with self._lock:
            self._unacked.clear()
            self.unacked_bytes = 0

    def unacknowledged(self) -> list[Any]:
        """Frames of every message the other side has not acknowledged, oldest first."""
        with self._lock:
            return list(self._unacked.values())

    @property
    def behind(self) -> bool:
        """Whether the other side has not acknowledged everything sent."""
        return self.peer_ack < self.sent
