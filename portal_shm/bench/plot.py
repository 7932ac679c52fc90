"""The report as a picture: env-steps/s against N, one line per system, log scales, one panel
per scenario. Needs matplotlib (optional): without it, :func:`plot_report` says so and returns."""

from __future__ import annotations

import math
import os
from typing import Optional

from .options import is_portal

STYLES = {  # system -> (color, marker, linestyle)
    "portal-process": ("#d62728", "o", "-"),
    "portal-docker": ("#ff7f0e", "s", "-"),
    "sync": ("#1f77b4", "^", "--"),
    "async": ("#2ca02c", "v", "--"),
    "envpool": ("#9467bd", "D", "--"),
    "portal-env": ("#8c564b", "x", "--"),
    "raw": ("#7f7f7f", ".", ":"),
    "ceiling": ("#000000", "_", ":"),
}


def matplotlib_missing() -> Optional[str]:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return "no plot: matplotlib is not installed (pip install matplotlib)"
    return None


def plot_report(report: dict, path: str) -> Optional[str]:
    """Write the PNG; returns None, or the note saying why there is no plot."""
    missing = matplotlib_missing()
    if missing:
        return missing
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    scenarios = list(dict.fromkeys(r["scenario"] for r in report["summary"]))
    if not scenarios:
        return "no plot: nothing was measured"
    cols = min(2, len(scenarios))
    rows = math.ceil(len(scenarios) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(6.4 * cols, 4.4 * rows), squeeze=False)
    for ax, scenario in zip(axes.flat, scenarios):
        measured = {r["system"] for r in report["summary"] if r["scenario"] == scenario}
        order = [s["name"] for s in report["systems"]] + ["raw", "ceiling"]
        systems = [s for s in dict.fromkeys(order) if s in measured] + sorted(measured - set(order))
        for system in systems:
            points = sorted(
                (r["num_envs"], r["steps_per_s"])
                for r in report["summary"]
                if r["scenario"] == scenario and r["system"] == system and r["steps_per_s"]
            )
            if not points:
                continue
            ns = [n for n, _ in points]
            color, marker, line = STYLES.get(system, (None, "o", "-"))
            ax.plot(
                ns,
                [s["median"] for _, s in points],
                label=system,
                color=color,
                marker=marker,
                linestyle=line,
                linewidth=2.2 if is_portal(system) else 1.4,
                markersize=5,
            )
            ax.fill_between(
                ns, [s["min"] for _, s in points], [s["max"] for _, s in points], color=color, alpha=0.12, linewidth=0
            )
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        all_n = sorted({r["num_envs"] for r in report["summary"] if r["scenario"] == scenario})
        ax.set_xticks(all_n, [str(n) for n in all_n])
        ax.set_title(scenario)
        ax.set_xlabel("N envs")
        ax.set_ylabel("env-steps/s")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8, loc="best")
    for ax in list(axes.flat)[len(scenarios) :]:
        ax.set_visible(False)
    machine, options = report["machine"], report["options"]
    fig.suptitle(
        f"portal-shm bench: median of {options['repeat']} interleaved {options['seconds']:g} s runs "
        f"(bands: min-max), {machine['cpu_count']} cores {machine['cpu_model'] or ''}",
        fontsize=10,
    )
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return None
