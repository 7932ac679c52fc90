#!/usr/bin/env python
"""Doorbell ping-pong: the per-step wake-up's round trip between two processes, side by side.

portal-shm's doorbell (a futex word inside the sealed ring, ``portal_shm/doorbell.py``) against
what it replaced, posix_ipc's named POSIX semaphores, and a glibc semaphore in shared memory
called through ctypes (the fastest semaphore a Python process can get). Rounds alternate between
the three so that a drifting machine hits them alike; the table gives the median round trip of
each round and the ratio to the doorbell's in the same round.

    python benchmarks/doorbell_pingpong.py --rounds 5 --trips 20000 [--json FILE]

posix_ipc is optional (``pip install posix_ipc``); without it that column is left out.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import mmap
import os
import statistics
import time

import numpy as np

from portal_shm.doorbell import Doorbell
from portal_shm.ring import create_segment


def _pingpong(wake_a, wait_a, wake_b, wait_b, trips: int) -> float:
    """Microseconds per round trip; the child answers every ``a`` with a ``b``."""
    pid = os.fork()
    if pid == 0:
        try:
            for _ in range(trips):
                if not wait_a():
                    os._exit(1)
                wake_b()
        finally:
            os._exit(0)
    start = time.perf_counter()
    for _ in range(trips):
        wake_a()
        if not wait_b():
            raise RuntimeError("the other process did not answer within 5 s")
    elapsed = time.perf_counter() - start
    _, status = os.waitpid(pid, 0)
    if status:
        raise RuntimeError("the answering process failed")
    return elapsed / trips * 1e6


def doorbell(trips: int) -> float:
    fd = create_segment("pingpong", 4096)
    words = np.ndarray((2, 16), np.uint32, buffer=mmap.mmap(fd, 4096))
    os.close(fd)
    a, b = Doorbell(words[0, :1]), Doorbell(words[1, :1])
    return _pingpong(a.ring, lambda: a.wait(5), b.ring, lambda: b.wait(5), trips)


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


def glibc_semaphore(trips: int) -> float:
    libc = ctypes.CDLL(None, use_errno=True)
    for name in ("sem_init", "sem_post", "sem_trywait"):
        getattr(libc, name).argtypes = [ctypes.c_void_p] + ([ctypes.c_int, ctypes.c_uint] if name == "sem_init" else [])
    libc.sem_timedwait.argtypes = [ctypes.c_void_p, ctypes.POINTER(_Timespec)]
    memory = mmap.mmap(-1, 4096)
    base = ctypes.addressof(ctypes.c_char.from_buffer(memory))
    a, b = base, base + 64
    libc.sem_init(a, 1, 0)
    libc.sem_init(b, 1, 0)

    def wait(sem: int) -> bool:
        if libc.sem_trywait(sem) == 0:
            return True
        deadline = time.time() + 5
        spec = _Timespec(int(deadline), int(deadline % 1 * 1e9))
        return libc.sem_timedwait(sem, ctypes.byref(spec)) == 0

    return _pingpong(lambda: libc.sem_post(a), lambda: wait(a), lambda: libc.sem_post(b), lambda: wait(b), trips)


def posix_ipc_semaphore(trips: int) -> float:
    import posix_ipc

    tag = f"/pingpong-{os.getpid()}"
    a = posix_ipc.Semaphore(tag + "a", posix_ipc.O_CREX, mode=0o600, initial_value=0)
    b = posix_ipc.Semaphore(tag + "b", posix_ipc.O_CREX, mode=0o600, initial_value=0)
    try:
        def wait(sem) -> bool:
            try:
                sem.acquire(5)
                return True
            except posix_ipc.BusyError:
                return False

        return _pingpong(a.release, lambda: wait(a), b.release, lambda: wait(b), trips)
    finally:
        for sem in (a, b):
            sem.unlink()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--trips", type=int, default=20000)
    parser.add_argument("--json", metavar="FILE")
    args = parser.parse_args()
    systems = {"doorbell": doorbell, "glibc semaphore (ctypes)": glibc_semaphore}
    try:
        import posix_ipc  # noqa: F401

        systems["posix_ipc named semaphore"] = posix_ipc_semaphore
    except ImportError:
        pass
    rounds = []
    for _ in range(args.rounds):
        rounds.append({name: run(args.trips) for name, run in systems.items()})
    print(f"{'system':<28} {'µs per round trip (median)':>27} {'ratio to doorbell (median, range)':>36}")
    summary = {}
    for name in systems:
        times = [r[name] for r in rounds]
        ratios = [r[name] / r["doorbell"] for r in rounds]
        summary[name] = {"us_per_round_trip": times, "ratio_to_doorbell": ratios}
        print(f"{name:<28} {statistics.median(times):>27.1f} "
              f"{statistics.median(ratios):>14.2f} [{min(ratios):.2f}-{max(ratios):.2f}]")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"trips": args.trips, "rounds": args.rounds, "cpu_count": os.cpu_count(),
                       "load_average_at_end": os.getloadavg(), "systems": summary}, handle, indent=1)


if __name__ == "__main__":
    main()
