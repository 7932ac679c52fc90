#!/usr/bin/env python
"""Kept for the commands quoted in older notes: a thin wrapper over ``portal-shm bench``
(``portal_shm/bench/``), which holds the harness. Prefer ``portal-shm bench --help``.

    python benchmarks/vector_bench.py --systems portal,sync,async --scenarios null:84x84x4,ALE/Pong-v5 \
        --num-envs 1,8 --seconds 1 --repeat 1 --json out.json

maps to ``portal-shm bench null:84x84x4 ALE/Pong-v5 --backends process --against sync,async ...``
(``portal`` -> backend process, ``docker`` -> backend docker, ``sync``/``async`` -> --against);
every other option is passed through unchanged.
"""

from __future__ import annotations

import sys
from typing import Optional

from portal_shm.bench.cli import main as bench_main

DEFAULT_SCENARIOS = "null:210x160x3,null:84x84x4,ALE/Pong-v5"


def translate(argv: list) -> list:
    """Old flags (--systems, --scenarios) to the bench verb's; the rest goes through as it is."""
    out, scenarios, systems, i = [], DEFAULT_SCENARIOS, "portal,sync,async", 0
    while i < len(argv):
        arg = argv[i]
        name, eq, value = arg.partition("=")
        if name in ("--systems", "--scenarios"):
            if not eq:
                i += 1
                value = argv[i] if i < len(argv) else ""
            scenarios, systems = (value, systems) if name == "--scenarios" else (scenarios, value)
        else:
            out.append(arg)
        i += 1
    chosen = [s.strip() for s in systems.split(",") if s.strip()]
    backends = [b for s, b in (("portal", "process"), ("docker", "docker")) if s in chosen]
    against = [s for s in chosen if s in ("sync", "async")]
    unknown = [s for s in chosen if s not in ("portal", "docker", "sync", "async")]
    if unknown:
        raise SystemExit(f"unknown systems {unknown}; choose from portal,docker,sync,async")
    if "--num-envs" not in " ".join(out) and "-n" not in out:
        out += ["--num-envs", "1,2,4,8,16,64"]
    return (
        [s for s in scenarios.split(",") if s.strip()]
        + ["--backends", ",".join(backends) or "none", "--against", ",".join(against) or "none"]
        + out
    )


def main(argv: Optional[list] = None) -> int:
    return bench_main(translate(sys.argv[1:] if argv is None else list(argv)))


if __name__ == "__main__":
    sys.exit(main())
