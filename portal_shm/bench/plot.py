"""The report as a picture, one panel per scenario: env-steps/s against N, one line per system on
log scales, or, where the scenario ran at one N only, a bar per system. Needs matplotlib
(optional): without it, :func:`plot_report` says so and returns."""

from __future__ import annotations

import math
import os
import textwrap
from typing import Any, Optional

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


def curves(ax: Any, rows: list, systems: list) -> None:
    """Steps/s against N, a line per system on log scales, its min-max as a band."""
    for system in systems:
        points = sorted((r["num_envs"], r["steps_per_s"]) for r in rows if r["system"] == system)
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
    all_n = sorted({r["num_envs"] for r in rows})
    ax.set_xticks(all_n, [str(n) for n in all_n])
    ax.set_xlabel("N envs")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="best")


def bars(ax: Any, rows: list, systems: list) -> None:
    """One N: a bar per system (its median, whiskers min-max, the figure on top); a curve of one
    point says nothing. References (raw, ceiling) hatched: they are no vector env."""
    for x, system in enumerate(systems):
        spread = next(r["steps_per_s"] for r in rows if r["system"] == system)
        median = spread["median"]
        color = STYLES.get(system, (None,))[0]
        ax.bar(
            [x],
            [median],
            yerr=[[median - spread["min"]], [spread["max"] - median]],
            color=color,
            alpha=1.0 if is_portal(system) else 0.75,
            hatch="//" if system in ("raw", "ceiling") else None,
            edgecolor="black" if is_portal(system) else None,
            capsize=3,
            label=system,
        )
        ax.annotate(
            f"{median:,.0f}", (x, spread["max"]), xytext=(0, 3), textcoords="offset points", ha="center", fontsize=7
        )
    ax.set_xticks(range(len(systems)), systems, rotation=30, ha="right", fontsize=8)
    ax.grid(True, axis="y", alpha=0.3)
    ax.margins(y=0.12)


def plot_report(report: dict, path: str) -> Optional[str]:
    """Write the PNG; returns None, or the note saying why there is no plot."""
    missing = matplotlib_missing()
    if missing:
        return missing
    if not report["summary"]:
        return "no plot: nothing was measured"
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig = figure(report)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return None


def figure(report: dict) -> Any:
    """The matplotlib figure of a report with a summary (matplotlib installed): a panel per scenario."""
    import matplotlib.pyplot as plt

    scenarios = list(dict.fromkeys(r["scenario"] for r in report["summary"]))
    cols = min(2, len(scenarios))
    grid_rows = math.ceil(len(scenarios) / cols)
    fig, axes = plt.subplots(grid_rows, cols, figsize=(6.4 * cols, 4.4 * grid_rows), squeeze=False)
    for ax, scenario in zip(axes.flat, scenarios):
        rows = [r for r in report["summary"] if r["scenario"] == scenario and r["steps_per_s"]]
        measured = {r["system"] for r in rows}
        order = [s["name"] for s in report["systems"]] + ["raw", "ceiling"]
        systems = [s for s in dict.fromkeys(order) if s in measured] + sorted(measured - set(order))
        all_n = sorted({r["num_envs"] for r in rows})
        if len(all_n) == 1:
            bars(ax, rows, systems)
            ax.set_title(f"{scenario}, N={all_n[0]}")
        else:
            curves(ax, rows, systems)
            ax.set_title(scenario)
        ax.set_ylabel("env-steps/s")
    for ax in list(axes.flat)[len(scenarios) :]:
        ax.set_visible(False)
    machine, options = report["machine"], report["options"]
    load = report.get("load") or {}
    title = (
        f"portal-shm bench: median of {options['repeat']} interleaved {options['seconds']:g} s runs "
        f"(bands, whiskers: min-max), {machine['cpu_count']} cores {machine['cpu_model'] or ''}"
    )
    if load.get("warning"):
        title += f"; {load['warning']}"
    fig.suptitle(
        textwrap.fill(title, 75 * cols, break_on_hyphens=False),
        fontsize=10,
        color="#b35900" if load.get("warning") else None,
    )
    fig.tight_layout()
    return fig
