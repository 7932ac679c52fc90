"""How to copy a batch out of the ring for the client: fresh arrays, or a pool reused once unreferenced.

    python benchmarks/copy_out.py [--iterations 3000]

The default ``copy=True`` copies each batch into fresh arrays (``agent/local/ring_views.py``). A
pool would reuse arrays nothing references any more (reference counts, as ``kept_views`` reads
them) and save the allocation; this measures both, side by side, for the batch sizes of the
benchmarks: a raw Pong batch of 8 frames, an 84x84x4 stack of 8 and 16, CartPole's observations
and a reward vector. The client holds the last batch while the next is copied, as a loop does.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

SHAPES = [
    ("Pong raw x8", (8, 210, 160, 3), np.uint8),
    ("84x84x4 x8", (8, 4, 84, 84), np.uint8),
    ("84x84x4 x16", (16, 4, 84, 84), np.uint8),
    ("CartPole x8", (8, 4), np.float32),
    ("reward x8", (8,), np.float64),
]


def fresh(source: np.ndarray, iterations: int) -> float:
    held = None
    start = time.perf_counter()
    for _ in range(iterations):
        held = source.copy()
    del held
    return (time.perf_counter() - start) / iterations * 1e6


def pooled(source: np.ndarray, iterations: int, size: int = 3) -> float:
    """Copies into a pool of ``size`` arrays, each reused once only the pool holds it (a held
    one is left to its holder and replaced)."""
    pool = [np.empty_like(source) for _ in range(size)]
    for _, out in enumerate(pool):  # the count of an unheld array, taken as the loop below takes it
        free = sys.getrefcount(out)
        break
    held, allocated = None, 0
    start = time.perf_counter()
    for _ in range(iterations):
        for _, out in enumerate(pool):
            if sys.getrefcount(out) == free:
                break
        else:
            out = np.empty_like(source)
            pool[0] = out
            allocated += 1
        np.copyto(out, source)
        held = out
    elapsed = time.perf_counter() - start
    del held
    assert allocated == 0, f"the pool allocated {allocated} times: its free count is wrong"
    return elapsed / iterations * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--iterations", type=int, default=3000)
    args = parser.parse_args()
    print(f"{'batch':<14} {'fresh us':>9} {'pooled us':>10}")
    for name, shape, dtype in SHAPES:
        source = np.random.default_rng(0).integers(0, 255, shape).astype(dtype)
        print(f"{name:<14} {fresh(source, args.iterations):>9.1f} {pooled(source, args.iterations):>10.1f}")


if __name__ == "__main__":
    main()
