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

Spin, then sleep (``spin_until``): on a VM, waking a process that sleeps on an idle core costs
tens of microseconds (the hypervisor halts and resumes the vCPU), more than a step of a cheap env.
So a waiter first watches a word of the ring for a short while, handing its core to any other
runnable task at every turn (``sched_yield``), and only then sleeps on its pipe. The other side
still rings every time (a write to a pipe nobody sleeps on is cheap), so no wake-up can be
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
from typing import Callable, Optional, Protocol, Sequence

_yield = getattr(os, "sched_yield", lambda: time.sleep(0))

_CHUNK = 4096  # rings left while the waiter spun pile up: read them into one reused buffer
_TURNS = 8  # spin turns (a yield and a look each) between looks at the running count
_CORES = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
_loadavg: Optional[int] = None


class _Closable(Protocol):
    def close(self) -> None: ...


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

    def take(self) -> bool:
        """Read the rings waiting in the pipe: False when there were none (or the pipe closed)."""
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
            self.take()

    def wait(self, timeout: float) -> bool:
        if self.closed:
            time.sleep(timeout)  # nothing will ring again: the caller's checks find out why
            return False
        # poll first: a read that finds nothing costs a Python exception, dearer than a poll
        return bool(self._poll.poll(timeout * 1000)) and self.take()

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

    def __init__(self, waiters: Callable[[], Sequence[Optional[Waiter]]]) -> None:
        self._waiters = waiters
        self._known: list[Waiter] = []
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
            if self._by_fd:
                events = self._poll.poll(remaining * 1000)
            else:
                time.sleep(remaining)
                events = []
            rung = False
            for fd, _ in events:
                waiter = self._by_fd[fd]
                rung = waiter.take() or rung
                if waiter.closed:
                    self._poll.unregister(fd)
                    del self._by_fd[fd]
            if rung or remaining <= 0:
                return rung


def spin_until(changed: Callable[[], bool], seconds: float, only_idle: bool = True) -> bool:
    """Call ``changed`` until it is true (True) or ``seconds`` have passed (False), yielding the
    core (``sched_yield``) at every turn.

    A spinner does not hand its core to a task that needs it: the scheduler keeps the two fair,
    so the spinner takes about half of that core however often it yields. ``only_idle`` therefore
    spins only while some core is idle (``cores_idle``): the agent, waiting for servers that step,
    then sleeps and leaves them the cores. Servers spin regardless, within their short budget and
    only when they are no more than the cores (the agent decides): the agent they wait for has
    just woken, and the scheduler favours it over a spinner.
    """
    if changed():
        return True
    if seconds <= 0:
        return False
    clock = time.perf_counter
    end = clock() + seconds
    while not only_idle or cores_idle():
        for _ in range(_TURNS):
            _yield()
            if changed():
                return True
        if clock() > end:
            return False
    return False


def cores_idle() -> bool:
    """True while no more tasks are runnable on this machine than this process has cores for,
    itself included (the running count of /proc/loadavg, cheap to read); False where unknown."""
    global _loadavg
    try:
        if _loadavg is None:
            _loadavg = os.open("/proc/loadavg", os.O_RDONLY | os.O_CLOEXEC)
        return int(os.pread(_loadavg, 128, 0).split()[3].split(b"/")[0]) <= _CORES
    except (OSError, ValueError, IndexError):
        return False


def close_all(ends: Sequence[Optional[_Closable]]) -> None:
    for end in ends:
        if end is not None:
            end.close()
