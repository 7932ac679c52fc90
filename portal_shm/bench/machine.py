"""What the report says about the machine: CPU, cores, memory, CPU steal, package versions."""

from __future__ import annotations

import os
import platform
import sys
from importlib import metadata
from typing import Optional

# Every package a benchmark may involve; absent ones are reported as null.
PACKAGES = (
    "portal-shm",
    "numpy",
    "gymnasium",
    "ale-py",
    "vizdoom",
    "envpool",
    "portal-env",
    "portal",
    "pyzmq",
    "msgpack",
    "docker",
    "rich",
    "matplotlib",
)


def _grep(path: str, key: str) -> Optional[str]:
    try:
        with open(path) as f:
            return next((line.split(":", 1)[1].strip() for line in f if line.startswith(key)), None)
    except OSError:
        return None


def version(package: str) -> Optional[str]:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def cpu_fields(line: str) -> Optional[list]:
    """The ticks of /proc/stat's aggregate ``cpu`` line (user nice system idle iowait irq softirq
    steal ...), or None for any other line."""
    fields = line.split()
    try:
        return [int(v) for v in fields[1:]] if fields and fields[0] == "cpu" else None
    except ValueError:
        return None


def read_cpu_times() -> Optional[list]:
    """The aggregate ``cpu`` line of /proc/stat (user nice system idle iowait irq softirq steal ...)."""
    try:
        with open("/proc/stat") as f:
            return cpu_fields(f.readline())
    except OSError:
        return None


def steal_share(before: Optional[list], after: Optional[list]) -> Optional[float]:
    """Share of CPU time the hypervisor gave to others between two readings (noisy-neighbour cost)."""
    if not before or not after or len(before) < 8 or len(after) < 8:
        return None
    delta = [b - a for a, b in zip(before[:8], after[:8])]
    total = sum(delta)
    return delta[7] / total if total > 0 else None


def docker_engine_version() -> Optional[str]:
    try:
        import docker

        return docker.from_env().version().get("Version")
    except Exception:
        return None


def machine_info(cpu_before: Optional[list] = None, with_docker: bool = False) -> dict:
    mem_kb = _grep("/proc/meminfo", "MemTotal")
    try:
        load = list(os.getloadavg())
    except OSError:
        load = None
    return {
        "cpu_model": _grep("/proc/cpuinfo", "model name") or platform.processor() or None,
        "cpu_count": os.cpu_count(),
        "mem_total_bytes": int(mem_kb.split()[0]) * 1024 if mem_kb else None,
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "cpu_steal_share": steal_share(cpu_before, read_cpu_times()),
        "load_average_at_end": load,
        "docker_engine": docker_engine_version() if with_docker else None,
        "versions": {p: version(p) for p in PACKAGES},
    }
