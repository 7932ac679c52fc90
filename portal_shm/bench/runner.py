"""Runs a benchmark: every (scenario, N) cell builds its systems, steps them interleaved for
``repeat`` rounds, measures the references, checks allocations, and closes everything whatever
happens. Returns the report (see ``report.py`` for its schema)."""

from __future__ import annotations

import time
import weakref
from typing import Any, Optional

import numpy as np

from . import measure
from .ceiling import CeilingPool, raw_run, sample_actions, single_env
from .cpu import server_pids
from .load import LoadMeter
from .options import REFERENCES, BenchOptions, is_portal
from .report import build_report, read_cpu_times
from .scenarios import Scenario
from .systems import SYSTEMS, close_quietly, supports_batches

# Systems whose async-batch pipeline is already primed (by the first measured run on them).
_PIPELINES_STARTED: "weakref.WeakSet[Any]" = weakref.WeakSet()


class BenchError(ValueError):
    """Options the harness cannot run (the CLI reports them as usage errors)."""


class Progress:
    """What the runner tells whoever watches; the CLI passes a rich live display."""

    def start(self, total: int) -> None: ...
    def status(self, text: str) -> None: ...
    def advance(self, sample: dict) -> None: ...
    def log(self, text: str) -> None: ...


def validate(options: BenchOptions, registry: dict) -> None:
    if not options.scenarios:
        raise BenchError("no scenario given")
    unknown = [s for s in options.systems() if s not in registry]
    if unknown:
        raise BenchError(f"unknown systems {unknown}; known: {', '.join(registry)}")
    if not options.systems():
        raise BenchError("nothing to run: give --backends and/or --against")
    if options.baseline and options.baseline not in options.systems() + list(REFERENCES):
        raise BenchError(f"--baseline {options.baseline} is not among the systems run: {', '.join(options.systems())}")
    if options.repeat < 1 or options.seconds <= 0 or not options.num_envs or min(options.num_envs) < 1:
        raise BenchError("--repeat, --seconds and every --num-envs value must be positive")
    if options.batch_size is not None:
        if options.batch_size < 1 or options.batch_size > min(options.num_envs):
            raise BenchError("--batch-size must be between 1 and the smallest --num-envs")


def plan(options: BenchOptions, registry: dict) -> tuple:
    """The cells to run, ``[(scenario, n, systems, references)]``, and the systems skipped."""
    cells, skipped, reasons = [], [], {}
    for sc in options.scenarios:
        for name in options.systems():
            reason = registry[name].skip_reason(sc, options)
            if reason:
                reasons[(name, sc.name)] = reason
                skipped.append({"system": name, "scenario": sc.name, "num_envs": None, "reason": reason})
        for n in options.num_envs_for(sc):
            systems = [s for s in options.systems() if (s, sc.name) not in reasons and options.runs_at(s, n)]
            refs = list(REFERENCES) if sc.is_game and options.references else []
            if systems or refs:
                cells.append((sc, n, systems, refs))
    return cells, skipped


def run_bench(
    options: BenchOptions,
    progress: Optional[Progress] = None,
    registry: Optional[dict] = None,
    command: Optional[list] = None,
) -> dict:
    registry = registry or SYSTEMS
    progress = progress or Progress()
    validate(options, registry)
    cells, skipped = plan(options, registry)
    samples, allocations, errors, startups, interrupted = [], [], [], [], False
    cpu_before, started = read_cpu_times(), time.time()
    progress.start(sum(len(systems + refs) * options.repeat for _, _, systems, refs in cells))
    lat = np.zeros(measure.LATENCY_CAPACITY, np.int64)  # allocated once, reused by every timed run
    load = LoadMeter()
    load.read()
    try:
        for sc, n, systems, refs in cells:
            run_cell(
                sc,
                n,
                systems,
                refs,
                options,
                registry,
                lat,
                progress,
                samples,
                allocations,
                skipped,
                errors,
                startups,
                load,
            )
    except KeyboardInterrupt:
        interrupted = True
        progress.log("interrupted: every env was closed; reporting what was measured")
    load.read()
    notes = [
        {"system": name, "scenario": sc.name, "note": note}
        for sc in options.scenarios
        for name in options.systems()
        if registry[name].note
        and (note := registry[name].note(sc))
        and not any(s["system"] == name and s["scenario"] == sc.name and s["num_envs"] is None for s in skipped)
    ]
    return build_report(
        options,
        registry,
        samples,
        allocations,
        skipped,
        notes,
        errors,
        startups,
        interrupted,
        command,
        started,
        cpu_before,
        load.result(),
    )


def run_cell(
    sc: Scenario,
    n: int,
    systems: list,
    refs: list,
    options: BenchOptions,
    registry: dict,
    lat: np.ndarray,
    progress: Progress,
    samples: list,
    allocations: list,
    skipped: list,
    errors: list,
    startups: list,
    load: LoadMeter,
) -> None:
    """Build every system of one cell, run them interleaved, close them all; ``load`` reads the
    machine after every timed run (and follows the systems' env servers)."""
    built: dict = {}
    per_run: set = set()
    single, pool, failed = None, None, True
    try:
        # AsyncVectorEnv forks: do it before envpool's threads or portal's lock files exist here.
        for name in sorted(systems, key=lambda s: s != "async"):
            if registry[name].per_run:  # built afresh in each of its runs, below
                per_run.add(name)
                continue
            progress.status(f"{sc.name} N={n}: starting {name}")
            begin = time.perf_counter()
            try:
                envs = registry[name].build(sc, n, options)
                try:
                    envs.reset(seed=options.seed)
                except BaseException:
                    close_quietly(envs, True)
                    raise
            except Exception as exc:
                reason = f"failed to start: {type(exc).__name__}: {str(exc)[:500]}"
                skipped.append({"system": name, "scenario": sc.name, "num_envs": n, "reason": reason})
                progress.log(f"{sc.name} N={n} {name}: {reason}")
                continue
            built[name] = envs
            load.follow(server_pids(envs))
            startups.append(
                {"scenario": sc.name, "num_envs": n, "system": name, "seconds": time.perf_counter() - begin}
            )
        actions = {name: sample_actions(envs.action_space, options.seed) for name, envs in built.items()}
        if refs:
            progress.status(f"{sc.name} N={n}: starting raw and ceiling loops")
            begin = time.perf_counter()
            single = single_env(sc, options.seed, options.warmup)
            pool = CeilingPool(sc, options.seconds, options.seed, options.warmup)
            startups.append(
                {"scenario": sc.name, "num_envs": n, "system": "raw", "seconds": time.perf_counter() - begin}
            )
        rotation = [s for s in systems if s in built or s in per_run] + refs
        for r in range(options.repeat):
            for name in list(rotation):
                progress.status(f"{sc.name} N={n}: {name} round {r + 1}/{options.repeat}")
                try:
                    if name in per_run:
                        result, startup = run_fresh(registry[name], sc, n, options, lat, load)
                        if r == 0:
                            startups.append({"scenario": sc.name, "num_envs": n, "system": name, "seconds": startup})
                    else:
                        result = run_one(name, built.get(name), actions.get(name), single, pool, options, lat)
                        load.read()
                except Exception as exc:
                    errors.append(
                        {
                            "system": name,
                            "scenario": sc.name,
                            "num_envs": n,
                            "round": r,
                            "error": f"{type(exc).__name__}: {str(exc)[:500]}",
                        }
                    )
                    progress.log(f"{sc.name} N={n} {name} failed in round {r + 1}: {exc!r}; dropped from this cell")
                    rotation.remove(name)
                    if name in built:
                        close_quietly(built.pop(name), True)
                    continue
                sample = {"scenario": sc.name, "num_envs": n, "system": name, "repeat": r, **result}
                samples.append(sample)
                progress.advance(sample)
        if options.alloc_steps > 0 and options.batch_size is None:
            for name in (s for s in built if is_portal(s) or s == "portal-views"):
                progress.status(f"{sc.name} N={n}: allocation check of {name}")
                alloc = measure.agent_allocations(
                    built[name], actions[name], options.alloc_steps, options.warmup, options.seconds
                )
                allocations.append({"scenario": sc.name, "num_envs": n, "system": name, **alloc})
        failed = False
    finally:
        for name, envs in built.items():
            problem = close_quietly(envs, failed)
            if problem:
                progress.log(f"{sc.name} N={n} {name}: {problem}")
        if single is not None:
            close_quietly(single[0], failed)
        if pool is not None:
            pool.close(failed)


def run_fresh(system: Any, sc: Scenario, n: int, options: BenchOptions, lat: np.ndarray, load: LoadMeter) -> tuple:
    """Build, reset, run and close a system that must not idle beside the others; returns the
    run's result and the seconds its build and reset took. ``load`` reads before it closes."""
    begin = time.perf_counter()
    envs = system.build(sc, n, options)
    failed = True
    try:
        load.follow(server_pids(envs))
        envs.reset(seed=options.seed)
        startup = time.perf_counter() - begin
        result = run_one(system.name, envs, sample_actions(envs.action_space, options.seed), None, None, options, lat)
        load.read()
        failed = False
        return result, startup
    finally:
        close_quietly(envs, failed)


def run_one(
    name: str, envs: Any, actions: Optional[list], single: Any, pool: Any, options: BenchOptions, lat: np.ndarray
) -> dict:
    if name == "raw":
        run = raw_run(*single, options.seconds)
        return {
            "steps_per_s": run["steps"] / run["seconds"],
            "p50_us": None,
            "p99_us": None,
            "agent_cpu": None,
            "cpu_s_per_1k_steps": 1000 * run["cpu_s"] / max(run["steps"], 1),
            "procs": 1,
            "mode": "raw",
        }
    if name == "ceiling":
        rate, cpu_per_1k = pool.run()
        return {
            "steps_per_s": rate,
            "p50_us": None,
            "p99_us": None,
            "agent_cpu": None,
            "cpu_s_per_1k_steps": cpu_per_1k,
            "procs": pool.workers,
            "mode": "raw",
        }
    notes = envs.bench_notes if callable(getattr(envs, "bench_notes", None)) else dict  # e.g. compression ratio
    if options.batch_size is not None and supports_batches(envs):
        first = envs not in _PIPELINES_STARTED
        result = measure.batched_run(envs, actions, options.seconds, options.warmup, lat, first)
        _PIPELINES_STARTED.add(envs)
        return {**result, "mode": "batch", **notes()}
    return {**measure.timed_run(envs, actions, options.seconds, options.warmup, lat), "mode": "lockstep", **notes()}
