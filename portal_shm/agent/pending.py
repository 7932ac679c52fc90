"""Which call a portal is waiting on: gymnasium's async protocol of ``*_async``/``*_wait`` pairs."""

from __future__ import annotations

from enum import Enum


class AsyncState(Enum):
    DEFAULT = "default"
    WAITING_RESET = "reset"
    WAITING_STEP = "step"
    WAITING_CALL = "call"
