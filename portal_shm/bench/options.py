"""The settings of one benchmark run, as the CLI parsed them (the library takes them as they are)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Optional

from .scenarios import Scenario

BACKENDS = ("process", "docker")
AGAINST = (
    "sync",
    "async",
    "portal-fns",
    "envpool",
    "ale-vector",
    "portal-env",
    "portal-lockstep",
    "portal-views",
    "envpool-lockstep",
    "remote",
    "remote-lockstep",
    "remote-x0",
    "remote-insecure",
    "remote-rpc",
    "ray",
    "ray-naive",
)
REFERENCES = ("raw", "ceiling")


def portal_system(backend: str) -> str:
    """The system name of portal_shm on one backend: ``portal-process``, ``portal-docker``."""
    return f"portal-{backend}"


def is_portal(system: str) -> bool:
    """portal_shm itself, on any backend (``portal-env`` is another project)."""
    return system in {portal_system(b) for b in BACKENDS}


@dataclass
class BenchOptions:
    scenarios: list  # of Scenario
    num_envs: list = field(default_factory=lambda: [8])
    backends: list = field(default_factory=lambda: ["process"])
    against: list = field(default_factory=lambda: ["sync", "async"])
    baseline: Optional[str] = None  # a system name; default: async if run, else the first system
    seconds: float = 2.0
    repeat: int = 3
    warmup: int = 10  # untimed batched steps before each timed run (capped at ``seconds`` of time)
    alloc_steps: int = 200  # portal steps under tracemalloc per cell (0: no allocation check)
    seed: int = 0
    envs_per_server: Optional[int] = None
    image: Optional[str] = None  # docker image for scenarios without a known one
    batch_size: Optional[int] = None  # async batches (send/recv); None: lockstep
    references: bool = True  # raw single-process speed and the N-core ceiling for game scenarios
    limits: dict = field(default_factory=dict)  # scenario or system name -> the N it runs at
    rtt_ms: float = 0.0  # remote systems: the emulated link's round trip (0: straight to the host)
    rate_mbit: Optional[float] = None  # remote systems: the emulated link's bandwidth each way
    compression: str = "auto"  # remote systems: the codec of observations ("auto", "none", "lz4", "zstd")

    def vector_kwargs(self, lockstep: bool = False) -> dict:
        """The portal's ``vector_kwargs`` these options ask for (``batch_size`` unless ``lockstep``)."""
        kwargs: dict = {}
        if self.batch_size is not None and not lockstep:
            kwargs["batch_size"] = self.batch_size
        if self.envs_per_server is not None:
            kwargs["envs_per_server"] = self.envs_per_server
        return kwargs

    def systems(self) -> list:
        """Every system of the run in rotation order: portal backends first, then the alternatives."""
        return [portal_system(b) for b in self.backends] + list(self.against)

    def resolved_baseline(self) -> str:
        systems = self.systems()
        if self.baseline:
            return self.baseline
        return "async" if "async" in systems else systems[0]

    def num_envs_for(self, scenario: Scenario) -> list:
        allowed = self.limits.get(scenario.name)
        return [n for n in self.num_envs if allowed is None or n in allowed]

    def runs_at(self, system: str, n: int) -> bool:
        allowed = self.limits.get(system)
        return allowed is None or n in allowed

    def as_json(self) -> dict:
        data = asdict(self)
        data["scenarios"] = [s.name for s in self.scenarios]
        data["baseline"] = self.resolved_baseline()
        data["limits"] = {k: list(v) for k, v in self.limits.items()}
        return data
