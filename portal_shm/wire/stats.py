"""Counters each env server keeps in its own rows of the ring, for the agent to read on demand.

No message per step: a server counts in Python and copies its counts into the ring every
``FLUSH_NS`` (and when idle), where the agent reads them whenever it is asked for statistics.
Steps are the one count the agent keeps itself (the step commands it posted to each server,
``ServerLink.seq`` less its control commands): a server's step loop does no counting at all.
Step latency is sampled (every ``SAMPLE_EVERY``-th server step times each of its envs) into
histograms with four buckets per octave: quantiles good to about 20 %, at no cost on the other
steps. What a server writes is untrusted: the agent clamps what it reads (``agent/local/stats_reader.py``).
"""

from __future__ import annotations

ENV_FIELDS = ("steps", "episodes", "resets", "sampled", "sampled_ns")
STEPS, EPISODES, RESETS, SAMPLED, SAMPLED_NS = range(len(ENV_FIELDS))
SERVER_FIELDS = ("steps", "busy_ns", "flushed_ns")
SERVER_STEPS, BUSY_NS, FLUSHED_NS = range(len(SERVER_FIELDS))

SAMPLE_EVERY = 64  # a power of two: the server tests ``seq & (SAMPLE_EVERY - 1)``, seq the agent's command number
FLUSH_NS = 50_000_000
_MIN_BITS, _MAX_BITS = 9, 36  # buckets from 256 ns to about 69 s
BUCKETS = 4 * (_MAX_BITS - _MIN_BITS + 1)


def bucket(ns: int) -> int:
    """The histogram bucket of a duration: 4 per octave, clamped to [256 ns, ~69 s)."""
    bits = ns.bit_length()
    if bits < _MIN_BITS:
        return 0
    if bits > _MAX_BITS:
        return BUCKETS - 1
    return 4 * (bits - _MIN_BITS) + ((ns >> (bits - 3)) & 3)


def bucket_bounds(index: int) -> tuple[float, float]:
    """The durations (ns) bucket ``index`` holds: [low, high)."""
    octave, quarter = divmod(index, 4)
    base = 1 << (octave + _MIN_BITS - 1)
    return base * (1 + quarter / 4), base * (1 + (quarter + 1) / 4)
