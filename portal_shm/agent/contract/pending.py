"""Which call a portal is waiting on: gymnasium's async protocol of ``*_async``/``*_wait`` pairs.

One ``PendingCall`` per portal holds it, whatever the kind (local ring, remote hosts): a second
``*_async`` before the ``*_wait`` is gymnasium's ``AlreadyPendingCallError``, a ``*_wait`` without
its ``*_async`` its ``NoAsyncCallError``, with gymnasium's messages, so code written against
``AsyncVectorEnv`` sees the same errors from every portal.
"""

from __future__ import annotations

from enum import Enum

from gymnasium.error import AlreadyPendingCallError, NoAsyncCallError


class AsyncState(Enum):
    DEFAULT = "default"
    WAITING_RESET = "reset"
    WAITING_STEP = "step"
    WAITING_CALL = "call"


class PendingCall:
    """The one async call in flight (``state``), started by ``begin`` and ended by ``end``."""

    def __init__(self) -> None:
        self.state = AsyncState.DEFAULT

    @property
    def idle(self) -> bool:
        return self.state is AsyncState.DEFAULT

    def check_idle(self, what: str) -> None:
        """Raise ``AlreadyPendingCallError`` when a call is in flight (``what`` would start another)."""
        if self.state is not AsyncState.DEFAULT:
            raise AlreadyPendingCallError(
                f"Calling `{what}` while waiting for a pending call to `{self.state.value}` to complete",
                str(self.state.value),
            )

    def begin(self, state: AsyncState) -> None:
        self.state = state

    def check_waiting(self, state: AsyncState) -> None:
        """Raise ``NoAsyncCallError`` unless ``state``'s ``*_async`` was called."""
        if self.state is not state:
            raise NoAsyncCallError(
                f"Calling `{state.value}_wait` without any prior call to `{state.value}_async`.", state.value
            )

    def end(self) -> None:
        self.state = AsyncState.DEFAULT
