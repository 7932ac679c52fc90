#!/usr/bin/env python
"""Doorbell round trips: the agent wakes S servers and waits for each, as in a lockstep step.

portal-shm's doorbells (a pipe per direction and server, ``portal_shm/wire/doorbell.py``) against
what they replaced, posix_ipc's named POSIX semaphores (optional: ``pip install posix_ipc``).
Rounds alternate between the two so that a drifting machine hits them alike; the table gives the
median microseconds per round (S wake-ups and S answers) and the ratio to the pipes' in the same
round. S=1 is a ping-pong; S=2 is two servers on this 2-core machine.

    python benchmarks/doorbell_pingpong.py --servers 1,2 --rounds 5 --trips 20000 [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

from portal_shm.wire.doorbell import Bell, Waiter, bell_pipe


def _fan_out(servers: int, trips: int, make_pair) -> float:
    """Microseconds per round: ring every server's go, then wait for every server's done."""
    pairs = [(make_pair(), make_pair()) for _ in range(servers)]  # (go, done) per server
    pids = []
    for index, (go, done) in enumerate(pairs):
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                for _ in range(trips):
                    if not go[1](5):
                        code = 1
                        break
                    done[0]()
            finally:
                os._exit(code)
        pids.append(pid)
    start = time.perf_counter()
    for _ in range(trips):
        for go, _ in pairs:
            go[0]()
        for _, done in pairs:
            if not done[1](5):
                raise RuntimeError("a server did not answer within 5 s")
    elapsed = time.perf_counter() - start
    for pid in pids:
        if os.waitpid(pid, 0)[1]:
            raise RuntimeError("a server failed")
    return elapsed / trips * 1e6


def pipes(servers: int, trips: int) -> float:
    opened = []

    def pair():
        read, write = bell_pipe()
        bell, waiter = Bell(write), Waiter(read)
        opened.extend((bell, waiter))
        return bell.ring, waiter.wait

    try:
        return _fan_out(servers, trips, pair)
    finally:
        for end in opened:
            end.close()


def posix_ipc_semaphores(servers: int, trips: int) -> float:
    import posix_ipc

    made = []

    def pair():
        sem = posix_ipc.Semaphore(f"/pingpong-{os.getpid()}-{len(made)}", posix_ipc.O_CREX, mode=0o600, initial_value=0)
        made.append(sem)

        def wait(timeout: float) -> bool:
            try:
                sem.acquire(timeout)
                return True
            except posix_ipc.BusyError:
                return False

        return sem.release, wait

    try:
        return _fan_out(servers, trips, pair)
    finally:
        for sem in made:
            sem.unlink()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--servers", default="1,2", help="comma list of S")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--trips", type=int, default=20000)
    parser.add_argument("--json", metavar="FILE")
    args = parser.parse_args()
    systems = {"pipes (portal-shm)": pipes}
    try:
        import posix_ipc  # noqa: F401

        systems["posix_ipc semaphores"] = posix_ipc_semaphores
    except ImportError:
        print("posix_ipc is not installed: pipes only")
    results = {}
    print(f"{'S':>2} {'system':<22} {'µs per round (median)':>22} {'ratio to pipes (median, range)':>32}")
    for servers in (int(n) for n in args.servers.split(",")):
        rounds = [{name: run(servers, args.trips) for name, run in systems.items()} for _ in range(args.rounds)]
        for name in systems:
            times = [r[name] for r in rounds]
            ratios = [r[name] / r["pipes (portal-shm)"] for r in rounds]
            results[f"{servers}:{name}"] = {
                "servers": servers,
                "system": name,
                "us_per_round": times,
                "ratio_to_pipes": ratios,
            }
            print(
                f"{servers:>2} {name:<22} {statistics.median(times):>22.1f} "
                f"{statistics.median(ratios):>17.2f} [{min(ratios):.2f}-{max(ratios):.2f}]"
            )
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(
                {
                    "trips": args.trips,
                    "rounds": args.rounds,
                    "cpu_count": os.cpu_count(),
                    "load_average_at_end": os.getloadavg(),
                    "results": results,
                },
                handle,
                indent=1,
            )


if __name__ == "__main__":
    main()
