"""``portal-shm tune``: find the ``vector_kwargs`` that step one env fastest on this machine.

The best layout depends on what the bench measures and a reader cannot guess: how much an env
step costs against a wake-up, how many cores there are, how long the agent thinks per batch.
So tune measures instead, within a time budget (two minutes by default):

1. **probe**: one env in this process, stepped for a moment: its step cost, what a reset costs
   and the share of time resets take (where the env can be made here; information only);
2. **screen**: every layout of the space (``tune_space.layouts``) with the default spin and
   ring, one short run each; then the other spin and ring settings of the best two layouts;
3. **refine**: the best few points (and the default layout, as the reference) stay built and
   run interleaved round by round, longer, so that drift of a noisy machine hits all alike; the
   winner is the best median of those rounds.

Runs are the bench's (``runner.run_one``: ``measure.timed_run`` for lockstep, ``batched_run``
for async batches). ``policy_ms`` stands in for the learner: after every ``step`` or ``recv``
the agent busy-waits that long, because a policy forward on the CPU (or a CUDA sync, which
spins by default) holds a core: it competes with the env servers for the cores, and which
layout wins depends on that. A ``sleep`` would hand the core to the servers and pick a layout
that only random actions enjoy.
"""

from __future__ import annotations

import os
import statistics
import time
from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from ..agent.contract.options import DEFAULT_RING_DEPTH
from ..runtimes.registry import backend_option_names
from ..server.envs import make_env
from . import measure
from .ceiling import sample_actions
from .cpu import server_pids
from .machine import machine_info
from .options import BenchOptions
from .runner import Progress, run_one
from .stats import paired_ratios
from .systems import close_quietly
from .tune_candidate import Candidate, PolicyLoad, rss_bytes
from .tune_space import Point, default_point, grid, layouts, spin_waits

SCHEMA_VERSION = 1
TOP_LAYOUTS = 2  # layouts whose spin and ring settings are screened too
RUN_OVERHEAD = 1.3  # a run's wall time over its timed seconds (warm-up: at most a quarter, and the rest)
REFINE_OVER_SCREEN = 2.5  # how much longer a refine run is than a screening run
SCREEN_SECONDS = (0.2, 2.0)  # bounds of one screening run
REFINE_SECONDS = (0.25, 8.0)  # bounds of one refine run
PROBE_SECONDS = 0.3
BUDGET_USED = 0.92  # of --budget-s planned for; the rest absorbs closing and slower builds than seen


class TuneError(ValueError):
    """Options tune cannot search, or a search in which no point could run (the CLI says which)."""


@dataclass
class TuneOptions:
    """One search. ``make_kwargs`` go to ``make_vec`` as they are (backend options such as
    ``image=``, and env kwargs); the narrowing lists, when given, replace the default space."""

    env_id: str
    num_envs: int
    backend: str = "process"
    make_kwargs: dict = field(default_factory=dict)
    policy_ms: float = 0.0
    batch: bool = False  # search async batch sizes too (the training loop uses send/recv)
    budget_s: float = 120.0
    envs_per_server: Optional[list] = None
    batch_sizes: Optional[list] = None
    spin_waits: Optional[list] = None  # of None (the default) and seconds
    ring_depths: Optional[list] = None
    refine: int = 3  # points refined beside the default layout
    rounds: int = 3
    seed: int = 0

    def validate(self) -> None:
        if not isinstance(self.num_envs, int) or self.num_envs < 1:
            raise TuneError(f"--num-envs must be a positive integer, got {self.num_envs!r}")
        if self.budget_s <= 0 or self.policy_ms < 0:
            raise TuneError("--budget-s must be positive and --policy-ms at least 0")
        if self.refine < 1 or self.rounds < 1:
            raise TuneError("--refine and --rounds must be at least 1")
        if self.batch_sizes and not self.batch:
            raise TuneError("--batch-sizes needs --batch (async batches are searched only with --batch)")
        if any(d < 2 for d in self.ring_depths or ()):
            raise TuneError(f"every --ring-depth must be at least 2, got {self.ring_depths}")
        if not self.layouts(os.cpu_count() or 1):
            raise TuneError(
                f"no layout of {self.num_envs} envs fits --envs-per-server {self.envs_per_server} and "
                f"--batch-sizes {self.batch_sizes}: envs per server are between 1 and --num-envs, and a batch is "
                "a multiple of them smaller than --num-envs"
            )

    def layouts(self, cores: int) -> list:
        """The layouts of the space these options search (``tune_space.layouts``)."""
        return layouts(self.num_envs, cores, self.batch, self.envs_per_server, self.batch_sizes)


def probe_env(env_id: str, env_kwargs: dict, seed: int, seconds: float = PROBE_SECONDS) -> dict:
    """One env made in this process, stepped for ``seconds`` with random actions: the step cost,
    the reset cost and the share of the loop's time resets took. An env that cannot be made here
    (it lives in a container or another interpreter) is reported as such: the probe only informs."""
    try:
        env = make_env(env_id, dict(env_kwargs))
    except Exception as exc:
        return {"error": f"cannot make {env_id} in this process ({type(exc).__name__}: {str(exc)[:200]})"}
    try:
        actions = sample_actions(env.action_space, seed)
        begin = time.perf_counter()
        env.reset(seed=seed)
        resets, reset_s, step_s, steps = 1, time.perf_counter() - begin, 0.0, 0
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            before = time.perf_counter()
            _, _, terminated, truncated, _ = env.step(actions[steps % len(actions)])
            after = time.perf_counter()
            step_s += after - before
            steps += 1
            if terminated or truncated:
                env.reset()
                reset_s += time.perf_counter() - after
                resets += 1
        return {
            "step_us": 1e6 * step_s / max(steps, 1),
            "reset_us": 1e6 * reset_s / resets,
            "episodes_seen": resets - 1,
            # with no episode ended in the probe, the share is unknown (long episodes: small)
            "reset_share": reset_s / (reset_s + step_s) if resets > 1 else None,
            "steps": steps,
        }
    finally:
        env.close()


class Search:
    """One tune run: builds, screens, refines and closes candidates within the budget."""

    def __init__(self, options: TuneOptions, progress: Optional[Progress] = None) -> None:
        options.validate()
        self.options = options
        self.progress = progress or Progress()
        self.cores = os.cpu_count() or 1
        self.started = time.perf_counter()
        self.deadline = self.started + BUDGET_USED * options.budget_s
        self.lat = np.zeros(measure.LATENCY_CAPACITY, np.int64)
        self.candidates: list = []
        self.build_times: list = []
        self.spins = spin_waits(options.spin_waits)
        self.depths = list(dict.fromkeys(options.ring_depths or (DEFAULT_RING_DEPTH, 2)))
        self.layouts = options.layouts(self.cores)
        self.reference = default_point(options.num_envs, self.cores)
        self.screen_s: list = []
        self.refine_s: Optional[float] = None

    # -- the plan ------------------------------------------------------------------------
    def variants_of(self, layout: tuple) -> list:
        base = (self.spins[0], self.depths[0])
        return [Point(*layout, s, d) for s in self.spins for d in self.depths if (s, d) != base]

    def planned_points(self) -> int:
        return len(self.layouts) + min(TOP_LAYOUTS, len(self.layouts)) * len(self.variants_of(self.layouts[0]))

    def refine_count(self) -> int:
        return min(self.options.refine, self.planned_points()) + 1  # the default layout beside them

    def _build_estimate(self) -> float:
        return statistics.median(self.build_times) if self.build_times else 1.0

    def _screen_seconds(self, points_left: int) -> float:
        """Spread what is left of the budget: the builds still to come, then screening runs and
        refine runs (``REFINE_OVER_SCREEN`` times longer), each ``RUN_OVERHEAD`` over its seconds."""
        left = self.deadline - time.perf_counter() - (points_left - 1) * self._build_estimate()
        runs = points_left + REFINE_OVER_SCREEN * self.options.rounds * self.refine_count()
        return min(max(left / (RUN_OVERHEAD * runs), SCREEN_SECONDS[0]), SCREEN_SECONDS[1])

    # -- candidates ----------------------------------------------------------------------
    def build(self, cand: Candidate) -> None:
        import portal_shm

        options = self.options
        begin = time.perf_counter()
        envs = portal_shm.make_vec(
            options.env_id,
            options.num_envs,
            backend=options.backend,
            vector_kwargs=cand.point.vector_kwargs(),
            **options.make_kwargs,
        )
        try:
            envs.reset(seed=options.seed)
        except BaseException:
            close_quietly(envs, True)
            raise
        cand.startup_s = time.perf_counter() - begin
        self.build_times.append(cand.startup_s)
        cand.server_rss_bytes = rss_bytes(server_pids(envs))
        cand.actions = sample_actions(envs.action_space, options.seed)
        cand.envs = PolicyLoad(envs, options.policy_ms / 1e3) if options.policy_ms else envs

    def run(self, cand: Candidate, seconds: float) -> dict:
        bench = BenchOptions(scenarios=[], seconds=seconds, warmup=10, batch_size=cand.point.batch_size)
        return run_one("portal", cand.envs, cand.actions, None, None, bench, self.lat)

    def close(self, cand: Candidate, failed: bool = False) -> None:
        if cand.envs is not None:
            envs, cand.envs = cand.envs, None
            problem = close_quietly(envs.envs if isinstance(envs, PolicyLoad) else envs, failed)
            if problem:
                self.progress.log(f"{cand.point.label(self.options.num_envs)}: {problem}")

    def screen(self, cand: Candidate, points_left: int) -> None:
        """Build, run once, and keep the portal only while it is among the best (or the reference)."""
        label = cand.point.label(self.options.num_envs)
        self.progress.status(f"{cand.phase}: starting {label}")
        self.candidates.append(cand)
        try:
            self.build(cand)
            seconds = self._screen_seconds(points_left)
            self.screen_s.append(seconds)
            self.progress.status(f"{cand.phase}: {label} for {seconds:.2f} s")
            cand.screen = self.run(cand, seconds)
        except Exception as exc:
            cand.error = f"{type(exc).__name__}: {str(exc)[:500]}"
            self.progress.log(f"{label} failed: {cand.error}")
            self.close(cand, True)
            self.progress.advance(self._sample(cand, cand.phase, -1, None))
            return
        self.progress.advance(self._sample(cand, cand.phase, -1, cand.screen_rate))
        kept = sorted(
            (c for c in self.candidates if c.envs is not None and c.point != self.reference),
            key=lambda c: c.screen_rate,
            reverse=True,
        )
        for worse in kept[self.options.refine :]:
            self.close(worse)

    def _sample(self, cand: Candidate, phase: str, round: int, rate: Optional[float]) -> dict:
        return {
            "scenario": f"{self.options.env_id} {phase}",
            "num_envs": self.options.num_envs,
            "system": cand.point.label(self.options.num_envs),
            "repeat": round,
            "steps_per_s": rate if rate is not None else float("nan"),
        }

    def refine_all(self) -> list:
        """Interleaved rounds over every portal still built, the order rotated each round so that
        no candidate always runs first (right after another's load) or last."""
        finalists = [c for c in self.candidates if c.envs is not None]
        if not finalists:
            return []
        rounds = self.options.rounds
        left = self.deadline - time.perf_counter() - 0.2 * len(finalists)
        self.refine_s = min(
            max(left / (RUN_OVERHEAD * rounds * max(len(finalists), 1)), REFINE_SECONDS[0]), REFINE_SECONDS[1]
        )
        for r in range(rounds):
            order = finalists[r % len(finalists) :] + finalists[: r % len(finalists)]
            for cand in order:
                if cand.envs is None:
                    continue
                label = cand.point.label(self.options.num_envs)
                self.progress.status(f"refine round {r + 1}/{rounds}: {label} for {self.refine_s:.2f} s")
                try:
                    cand.refine[r] = self.run(cand, self.refine_s)["steps_per_s"]
                except Exception as exc:
                    cand.error = f"{type(exc).__name__} in refine round {r + 1}: {str(exc)[:500]}"
                    cand.refine.clear()
                    self.progress.log(f"{label} failed: {cand.error}; dropped")
                    self.close(cand, True)
                    continue
                self.progress.advance(self._sample(cand, f"refine round {r + 1}", r, cand.refine[r]))
        return [c for c in finalists if c.refine]

    def probe(self) -> dict:
        """``probe_env`` where the env runs as it would here: the process backend in this interpreter."""
        options = self.options
        runtime = [k for k in options.make_kwargs if k in backend_option_names(options.backend)]
        if options.backend != "process" or runtime:
            where = f"the {options.backend} backend" + (f" with {', '.join(runtime)}" if runtime else "")
            return {"error": f"not probed: the env runs on {where}, perhaps not importable in this process"}
        return probe_env(options.env_id, options.make_kwargs, options.seed)

    # -- the whole search ----------------------------------------------------------------
    def execute(self) -> dict:
        options = self.options
        self.progress.start(self.planned_points() + options.rounds * self.refine_count())
        self.progress.status(f"probing one {options.env_id} in this process")
        probe = self.probe()
        try:
            order = sorted(self.layouts, key=lambda layout: layout != self.reference.layout)
            base = (self.spins[0], self.depths[0])
            for i, layout in enumerate(order):
                self.screen(Candidate(Point(*layout, *base), "screen"), self.planned_points() - i)
            if self.reference not in [c.point for c in self.candidates]:  # a narrowed space without it
                self.screen(Candidate(self.reference, "reference"), self.planned_points() - len(order) + 1)
            screened = [c for c in self.candidates if c.screen]
            if not screened:
                errors = "; ".join(f"{c.point.label(options.num_envs)}: {c.error}" for c in self.candidates)
                raise TuneError(f"no layout of {options.num_envs} x {options.env_id} could run: {errors}")
            top = sorted(screened, key=lambda c: c.screen_rate, reverse=True)[:TOP_LAYOUTS]
            variants = [Candidate(p, "variant") for c in top for p in self.variants_of(c.point.layout)]
            for i, cand in enumerate(variants):
                self.screen(cand, len(variants) - i)
            finalists = self.refine_all()
        finally:
            for cand in self.candidates:
                self.close(cand)
        if not finalists:
            raise TuneError(f"every refined point of {options.num_envs} x {options.env_id} failed: see the log above")
        return self.report(probe, finalists)

    def report(self, probe: dict, finalists: list) -> dict:
        options = self.options
        winner = max(finalists, key=lambda c: c.refine_rate)
        reference = next((c for c in finalists if c.point == self.reference), None)
        x_default = paired_ratios(winner.refine, reference.refine) if reference is not None else []
        info = machine_info()
        return {
            "schema_version": SCHEMA_VERSION,
            "env_id": options.env_id,
            "num_envs": options.num_envs,
            "backend": options.backend,
            "make_kwargs": options.make_kwargs,
            "policy_ms": options.policy_ms,
            "batch": options.batch,
            "machine": {
                "cores": info["cpu_count"],
                "cpu_model": info["cpu_model"],
                "python": info["python"],
                "load_average_at_end": info["load_average_at_end"],
            },
            "vector_kwargs": winner.point.vector_kwargs(),
            "label": winner.point.label(options.num_envs),
            "steps_per_s": winner.refine_rate,
            "default": {
                "vector_kwargs": self.reference.vector_kwargs(),
                "steps_per_s": reference.refine_rate if reference is not None else None,
                "x_default_pairs": x_default,
                "x_default": statistics.median(x_default) if x_default else None,
            },
            "env": {
                **probe,
                "server_rss_bytes": next((c.server_rss_bytes for c in self.candidates if c.server_rss_bytes), None),
            },
            "plan": {
                "budget_s": options.budget_s,
                "screen_seconds": self.screen_s,
                "refine_seconds": self.refine_s,
                "rounds": options.rounds,
                "space_points": len(
                    grid(
                        options.num_envs,
                        self.cores,
                        options.batch,
                        options.envs_per_server,
                        options.batch_sizes,
                        self.spins,
                        self.depths,
                    )
                ),
            },
            "wall_s": time.perf_counter() - self.started,
            "created": time.strftime("%Y-%m-%d %H:%M:%S %z"),
            "measured": [c.entry(options.num_envs, self.reference, c is winner) for c in self.candidates],
        }


def tune(options: TuneOptions, progress: Optional[Progress] = None) -> dict:
    """Search ``options``' space on this machine and return the report ``--write`` saves: the
    winner's ``vector_kwargs`` and ``steps_per_s``, the machine, and every point measured.

    The winner is the refined point with the best median over the interleaved rounds (screening
    rates, from single short runs, only choose what is refined). ``portal_shm.load_tuning`` and
    ``make_vec(tune=...)`` read the report back."""
    return Search(options, progress).execute()
