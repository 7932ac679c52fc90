"""The per-step wake-ups between the agent and a server: a pipe per direction and server.

The agent creates both pipes of a server and hands the server its ends (the read end of ``go``,
the write end of ``done``) with the ring (``handoff``); it keeps the other two. Each end is its
own open file description, held by one side only, so a server can neither steal the agent's
wake-ups, nor make the agent's end blocking, nor truncate anything under it: the worst a hostile
server can do is ring too often (a spurious wake-up: the agent then reads status words it
validates) or never (a timeout). The agent never blocks on a write (its ends are non-blocking; a
full pipe already holds wake-ups), and a closed end reads as end-of-file, never as a ring.
Rings do not queue up: a wake-up means "rung since you last looked". ``select.poll`` lets the
agent wait on all servers at once (``AnyDone``, for async batches), and a restarted server gets
fresh pipes, so no stale ring crosses a restart.

Spin, then sleep (``spin_until``): on this kind of VM, waking a process that sleeps on an idle
core costs 20-40 us (the hypervisor halts and resumes the vCPU), more than a step of a cheap env.
So a waiter first watches a word of the ring for a short while, handing its core to any other
runnable task at every turn (``sched_yield``), and only then sleeps on its pipe. The other side
still rings every time (a write to a pipe nobody sleeps on costs ~0.4 us), so no wake-up can be
lost to memory ordering; rings that found the waiter spinning are left in the pipe and read
later as spurious wake-ups, which the waiter tells apart by the word it watches.

What this replaced, and why: named POSIX semaphores are files a server could truncate (the agent
dies of SIGBUS); a glibc semaphore in shared memory aborts the process that waits on it once a
server scribbles on its ``private`` field (tried: "The futex facility returned an unexpected error
code"); eventfds share one description between both sides, so a server could clear O_NONBLOCK and
steal a count, leaving the agent blocked for good. A futex word of our own is safe but needs
ctypes on every call, which measured no faster than pipes here.
"""

from __future__ import annotations

import os
import select
import time
from typing import Callable, Optional, Sequence

_yield = getattr(os, "sched_yield", lambda: time.sleep(0))

_CHUNK = 4096  # rings left while the waiter spun pile up: read them into one reused buffer


def bell_pipe() -> tuple[int, int]:
    """A new (read end, write end), both close-on-exec."""
    return os.pipe2(os.O_CLOEXEC)


class Bell:
    """The ringing end of a pipe: one byte per ring, never blocking."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        os.set_blocking(fd, False)

    def ring(self) -> None:
        try:
            os.write(self.fd, b"\0")
        except BlockingIOError:
            pass  # a full pipe already holds wake-ups the other side has not read
        except BrokenPipeError:
            pass  # the other side is gone: its owner notices that by other means

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


class Waiter:
    """The waiting end of a pipe: ``wait`` is True once rung since the last wait."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        os.set_blocking(fd, False)
        self._poll = select.poll()
        self._poll.register(fd, select.POLLIN)
        self._buffer = [bytearray(_CHUNK)]
        self._skipped = 0
        self.closed = False  # the ringing end is closed everywhere

    def _take(self) -> bool:
        try:
            count = os.readv(self.fd, self._buffer)
        except BlockingIOError:
            return False
        if not count:
            self.closed = True
        return bool(count)

    def skipped(self) -> None:
        """A ring was answered without reading it (the waiter saw its word while spinning): read
        the pile now and then, so that the pipe never fills and rings never fail."""
        self._skipped += 1
        if self._skipped >= _CHUNK // 2:
            self._skipped = 0
            self._take()

    def wait(self, timeout: float) -> bool:
        if self.closed:
            time.sleep(timeout)  # nothing will ring again: the caller's checks find out why
            return False
        # poll first: a read that finds nothing costs a Python exception, dearer than a poll
        return bool(self._poll.poll(timeout * 1000)) and self._take()

    def close(self) -> None:
        if self.fd >= 0:
            self._poll.unregister(self.fd)
            os.close(self.fd)
            self.fd = -1


class AnyDone:
    """Wait for any of several servers' ``done`` ends (async batches): True when one rang.

    ``waiters`` is asked for the current ends on every wait, so a restarted server's fresh end
    takes its predecessor's place.
    """

    def __init__(self, waiters: Callable[[], Sequence[Waiter]]) -> None:
        self._waiters = waiters
        self._known: list = []
        self._poll = select.poll()
        self._by_fd: dict[int, Waiter] = {}

    def _refresh(self) -> None:
        current = [w for w in self._waiters() if w is not None]
        if current == self._known:
            return
        for fd in self._by_fd:
            self._poll.unregister(fd)
        self._by_fd = {w.fd: w for w in current if not w.closed and w.fd >= 0}
        for fd in self._by_fd:
            self._poll.register(fd, select.POLLIN)
        self._known = current

    def wait(self, timeout: float) -> bool:
        self._refresh()
        deadline = time.monotonic() + timeout
        while True:
            remaining = max(0.0, deadline - time.monotonic())
            events = self._poll.poll(remaining * 1000) if self._by_fd else time.sleep(remaining)
            rung = False
            for fd, _ in events or ():
                waiter = self._by_fd[fd]
                rung = waiter._take() or rung
                if waiter.closed:
                    self._poll.unregister(fd)
                    del self._by_fd[fd]
            if rung or remaining <= 0:
                return rung


def spin_until(changed: Callable[[], bool], seconds: float) -> bool:
    """Call ``changed`` until it is true (returns True) or ``seconds`` have passed (False).

    Every turn yields the core (``sched_yield``): a task that has work on it runs at once, so the
    spin costs a busy machine a context switch now and then, and an idle core its idle time.
    """
    if changed():
        return True
    clock = time.perf_counter
    end = clock() + seconds
    while clock() < end:
        _yield()
        if changed():
            return True
    return False


def close_all(ends: Sequence[Optional[object]]) -> None:
    for end in ends:
        if end is not None:
            end.close()
