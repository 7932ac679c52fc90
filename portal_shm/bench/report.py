"""The benchmark report: one JSON document with a stable, versioned schema.

Schema (``schema_version`` 1; the same text, with an example, is in ``benchmarks/SCHEMA.md``).
New fields may appear without a change of ``schema_version``; renaming or removing a field, or
changing its meaning, bumps it. Readers should ignore fields they do not know.

- ``schema_version`` (int, 1), ``tool`` ("portal-shm bench"), ``created`` (ISO 8601 UTC),
  ``duration_s`` (float), ``command`` (list of str or null), ``interrupted`` (bool: Ctrl-C, partial).
- ``options``: the run's settings: ``scenarios`` (list of str), ``num_envs`` (list of int),
  ``backends``, ``against`` (lists of str), ``baseline`` (str, the system ratios are taken to),
  ``seconds`` (float), ``repeat``, ``warmup``, ``alloc_steps``, ``seed`` (int), ``envs_per_server``,
  ``batch_size`` (int or null), ``image`` (str or null), ``references`` (bool),
  ``limits`` (object: scenario or system name -> list of N).
- ``machine``: ``cpu_model`` (str), ``cpu_count`` (int), ``mem_total_bytes`` (int),
  ``platform``, ``python`` (str), ``cpu_steal_share`` (float or null: steal time over the run),
  ``load_average_at_end`` (list of 3 floats), ``docker_engine`` (str or null), ``versions``
  (object: package -> version or null).
- ``load``: other work on the machine during the run (``load.judge``; null off Linux): ``{cores,
  seconds, readings, own_cores, other_cores, other_cores_max, skewed, warning (str or null)}``.
- ``systems``: list of ``{name, label, role, package, version}``; ``role`` is "portal",
  "alternative" or "reference" (``raw``: one env in a plain loop in the agent process;
  ``ceiling``: ``cpu_count`` such loops in parallel processes, summed).
- ``samples``: one per timed run: ``{scenario, num_envs, system, repeat (round index), mode
  ("lockstep", "batch" or "raw"), steps_per_s (float: env-steps per second), p50_us, p99_us
  (float or null: per batched step, or per recv in batch mode), agent_cpu (float or null: CPU
  seconds of the agent process per wall second), cpu_s_per_1k_steps (float or null: CPU seconds
  of the agent process and every process working for it, env servers and containers included,
  per 1,000 env steps; for references, of their loops)}``, plus ``batched_steps``, ``env_steps``,
  ``seconds``, ``mean_us`` for vector systems and ``procs`` for references.
- ``summary``: one per (scenario, num_envs, system): ``{scenario, num_envs, system, repeats,
  steps_per_s: spread, p50_us, p99_us, agent_cpu, cpu_s_per_1k_steps (medians or null),
  x_baseline: spread or null,
  x_ceiling: spread or null, alloc: allocation or null, startup_s: float or null (from ``startup``;
  for ``raw``: the single env and the ceiling processes)}``; a spread is ``{median, min, max, n}``.
  Ratios are pair by pair: the median over rounds i of ``system[i] / baseline[i]``.
- ``allocations``: per portal system and cell (lockstep runs only; at most ``alloc_steps`` steps and
  about ``seconds`` of them): ``{scenario, num_envs, system, steps, obs_bytes,
  steps_with_obs_sized_alloc, max_transient_bytes, mean_transient_bytes, retained_obs_sized_blocks}``.
- ``startup``: ``{scenario, num_envs, system, seconds}``: wall time to build and reset each system
  in each cell (``raw`` here: the single env plus the ceiling processes).
- ``skipped``: ``{system, scenario, num_envs (int, or null for every N), reason}``: systems not
  installed, not applicable, or failing to start; never stood in for.
- ``errors``: ``{system, scenario, num_envs, round, error}``: runs that raised mid-cell.
- ``notes``: ``{system, scenario, note}``: what differs in how a system runs a scenario.
- ``targets``: ``{target, value, ok}``: the project's checks at N=8, where measured.
- ``transport_bound``: per scenario whose env is too cheap to tell runners apart by more than their
  transports (``cheap_env``): ``{scenario, num_envs (list), env_step_us, env_share, text}``.
- ``leftover_shm``: /dev/shm names of this process still present at the end (should be empty).
"""

from __future__ import annotations

import datetime
import json
import os
import time
from typing import Any, Optional

from .cheap_env import transport_bound
from .machine import machine_info, read_cpu_times, version  # noqa: F401  (read_cpu_times: runner)
from .options import BenchOptions
from .stats import summarize, targets

SCHEMA_VERSION = 1
ROLES = {"raw": "reference", "ceiling": "reference"}


def own_leftovers() -> list:
    """/dev/shm names of this process (the ring is an unnamed memfd: any entry here is a leak)."""
    tag = f"psm-{os.getpid()}-"
    return sorted(name for name in os.listdir("/dev/shm") if tag in name) if os.path.isdir("/dev/shm") else []


def systems_info(options: BenchOptions, registry: dict) -> list:
    found = []
    for name in options.systems():
        system = registry[name]
        found.append(
            {
                "name": name,
                "label": system.label,
                "role": "portal" if system.package == "portal-shm" else "alternative",
                "package": system.package,
                "version": version(system.package),
            }
        )
    if options.references and any(sc.is_game for sc in options.scenarios):
        found += [
            {
                "name": "raw",
                "label": "one env in a plain loop in the agent process",
                "role": "reference",
                "package": None,
                "version": None,
            },
            {
                "name": "ceiling",
                "label": f"{os.cpu_count()} plain loops in parallel processes, summed",
                "role": "reference",
                "package": None,
                "version": None,
            },
        ]
    return found


def build_report(
    options: BenchOptions,
    registry: dict,
    samples: list,
    allocations: list,
    skipped: list,
    notes: list,
    errors: list,
    startups: list,
    interrupted: bool,
    command: Optional[list],
    started: float,
    cpu_before: Optional[list],
    load: Optional[dict] = None,
) -> dict:
    baseline = options.resolved_baseline()
    order = options.systems() + ["raw", "ceiling"]
    rows = summarize(samples, baseline, order, allocations, startups)
    machine = machine_info(cpu_before, with_docker="docker" in options.backends)
    return {
        "schema_version": SCHEMA_VERSION,
        "tool": "portal-shm bench",
        "created": datetime.datetime.fromtimestamp(started, datetime.timezone.utc).isoformat(timespec="seconds"),
        "duration_s": time.time() - started,
        "command": command,
        "interrupted": interrupted,
        "options": options.as_json(),
        "machine": machine,
        "load": load,
        "systems": systems_info(options, registry),
        "samples": samples,
        "summary": rows,
        "allocations": allocations,
        "startup": startups,
        "skipped": skipped,
        "errors": errors,
        "notes": notes,
        "targets": targets(rows, samples),
        "transport_bound": transport_bound(rows, machine["cpu_count"] or 1),
        "leftover_shm": own_leftovers(),
    }


def write_json(report: dict, path: str) -> None:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        json.dump(report, f, indent=1, default=_plain)
        f.write("\n")


def _plain(value: Any) -> Any:
    """numpy scalars and tuples that slipped into options or results."""
    if hasattr(value, "item"):
        return value.item()
    if isinstance(value, (set, tuple)):
        return list(value)
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")
