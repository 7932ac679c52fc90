"""The docs' plots, drawn from the benchmark results in ``benchmarks/results`` and the examples'
training curves in ``examples/results``.

    python benchmarks/plot_results.py docs/performance/plots       # every plot the docs show
    python benchmarks/plot_results.py --headline docs/assets/headline.png   # README's figure

Each bar chart is one cell of one ``portal-shm bench`` run (a scenario at one N): every system's
env-steps/s as a multiple of the ceiling measured in the same run (two plain single-env loops in
parallel processes), medians of interleaved rounds with their min-max. Nothing is typed in by
hand: change a result file and the picture follows. The mkdocs build runs this script
(``docs/hooks/plots.py``); the headline PNG is committed, since GitHub shows README without a build.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(ROOT, "benchmarks", "results")
sys.path.insert(0, ROOT)

# (output name, results file, scenario, N, title)
BARS = [
    ("pong8", "hotpath_pong8.json", "ALE/Pong-v5", 8, "Pong, 8 envs, lockstep"),
    ("pong16_batches", "hotpath_pong16.json", "ALE/Pong-v5", 16, "Pong, 16 envs, batches of 8"),
    ("cartpole32_batches", "hotpath_cartpole32.json", "CartPole-v1", 32, "CartPole, 32 envs, batches of 16"),
    ("vizdoom16_batches", "hotpath_vizdoom16.json", "VizdoomBasic-v1", 16, "VizdoomBasic, 16 envs, batches of 8"),
]
# (output name, results file): env-steps/s against N, every system of the run
SWEEPS = [("sweep", "bench_2core.json")]
# (output name, results file of benchmarks/scaling.py): throughput, memory, start-up, close against N
SCALING = [("scaling", "scaling_2core.json")]
# (output name, an example's --save-curve CSV under examples/results, title: what ran, where, when)
CURVES = [
    (
        "training_reinforce_cartpole",
        "reinforce_cartpole.csv",
        "reinforce_cartpole.py: CartPole-v1, 8 envs (process), 2-core AMD EPYC, 2026-12-05",
    ),
    (
        "training_vizdoom_basic",
        "ppo_vizdoom_basic.csv",
        "ppo_vizdoom.py: VizdoomBasic-v1, 8 envs (docker), CPU torch, 2-core VM, 2026-11-30",
    ),
]
PORTAL_COLOR, OTHER_COLOR, REFERENCE_COLOR = "#d62728", "#1f77b4", "#7f7f7f"


def load(name: str) -> dict:
    with open(os.path.join(RESULTS, name)) as file:
        return json.load(file)


def command_of(report: dict) -> str:
    command = report["command"]
    words = command if isinstance(command, list) else command.split()
    words = [os.path.basename(w) if w.endswith("portal-shm") else w for w in words]
    for flag in ("--json", "--table", "--plot", "--markdown"):  # where the run wrote its results is not what to run
        if flag in words:
            at = words.index(flag)
            words = words[:at] + words[at + 2 :]
    return " ".join(w for w in words if w != "-q")


def bar_chart(report: dict, scenario: str, num_envs: int, title: str, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in report["summary"] if r["scenario"] == scenario and r["num_envs"] == num_envs]
    rows = [r for r in rows if r["x_ceiling"] or r["system"] == "ceiling"]
    if not rows:
        raise SystemExit(f"{scenario} N={num_envs}: no row with a ceiling ratio in this results file")
    rows.sort(key=lambda r: -(1.0 if r["system"] == "ceiling" else r["x_ceiling"]["median"]))
    names = [r["system"] for r in rows]
    medians = [1.0 if r["system"] == "ceiling" else r["x_ceiling"]["median"] for r in rows]
    low = [0.0 if r["system"] == "ceiling" else m - r["x_ceiling"]["min"] for r, m in zip(rows, medians)]
    high = [0.0 if r["system"] == "ceiling" else r["x_ceiling"]["max"] - m for r, m in zip(rows, medians)]
    colors = [
        PORTAL_COLOR if n.startswith("portal") else REFERENCE_COLOR if n in ("raw", "ceiling") else OTHER_COLOR
        for n in names
    ]
    fig, ax = plt.subplots(figsize=(7.0, 0.55 * len(rows) + 1.6))
    y = range(len(rows))
    ax.barh(list(y), medians, xerr=[low, high], color=colors, alpha=0.85, capsize=3)
    for i, (m, h, r) in enumerate(zip(medians, high, rows)):
        steps = r["steps_per_s"]["median"] if r.get("steps_per_s") else None
        label = f"{m:.2f}x" + (f"  ({steps:,.0f}/s)" if steps else "")
        ax.text(m + h + 0.02, i, label, va="center", fontsize=9)
    ax.set_yticks(list(y), names)
    ax.invert_yaxis()
    ax.set_xlim(0, max(1.25, max(m + h for m, h in zip(medians, high)) + 0.35))
    ax.axvline(1.0, color="black", linewidth=0.8, linestyle=":")
    ax.set_xlabel("env-steps/s x the ceiling (two raw loops in parallel), median and min-max")
    machine = report.get("machine", {})
    ax.set_title(
        f"{title}: {machine.get('cpu_count', '?')} cores, {machine.get('cpu_model') or 'this VM'}, "
        f"{report.get('created', '')[:10]}",
        fontsize=10,
    )
    fig.text(0.01, 0.01, command_of(report), fontsize=8, color="#444444")
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    fig.savefig(path, dpi=100)
    plt.close(fig)


def sweep_chart(report: dict, path: str) -> None:
    """Env-steps/s against N, a panel per scenario, every system of the run; one legend for all
    panels, below them, in a font as large as the axes' (a legend inside a panel hides lines)."""
    import math

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from portal_shm.bench.plot import STYLES

    summary = [r for r in report["summary"] if r["steps_per_s"]]
    scenarios = list(dict.fromkeys(r["scenario"] for r in summary))
    order = [s["name"] for s in report["systems"]] + ["raw", "ceiling"]
    cols = min(2, len(scenarios))
    rows = math.ceil(len(scenarios) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.8 * cols, 3.4 * rows + 1.3), squeeze=False)
    handles: dict = {}
    for ax, scenario in zip(axes.flat, scenarios):
        cells = [r for r in summary if r["scenario"] == scenario]
        for system in [s for s in dict.fromkeys(order) if any(r["system"] == s for r in cells)]:
            points = sorted((r["num_envs"], r["steps_per_s"]) for r in cells if r["system"] == system)
            ns = [n for n, _ in points]
            color, marker, line = STYLES.get(system, (None, "o", "-"))
            (handle,) = ax.plot(
                ns,
                [p["median"] for _, p in points],
                color=color,
                marker=marker,
                linestyle=line,
                linewidth=2.4 if system.startswith("portal-") and system != "portal-env" else 1.4,
                markersize=6,
            )
            ax.fill_between(ns, [p["min"] for _, p in points], [p["max"] for _, p in points], color=color, alpha=0.1)
            handles.setdefault(system, handle)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        all_n = sorted({r["num_envs"] for r in cells})
        ax.set_xticks(all_n, [str(n) for n in all_n])
        ax.tick_params(labelsize=10)
        ax.set_title(scenario, fontsize=12)
        ax.set_xlabel("N envs", fontsize=11)
        ax.set_ylabel("env-steps/s", fontsize=11)
        ax.grid(True, which="both", alpha=0.3)
    for ax in list(axes.flat)[len(scenarios) :]:
        ax.set_visible(False)
    machine, options = report.get("machine", {}), report["options"]
    fig.suptitle(
        f"env-steps/s against N, median of {options['repeat']} interleaved {options['seconds']:g} s rounds "
        f"(bands: min-max)\n{machine.get('cpu_count', '?')} cores, {machine.get('cpu_model') or 'this VM'}, "
        f"{report.get('created', '')[:10]}",
        fontsize=12,
    )
    per_row = 4
    fig.legend(list(handles.values()), list(handles), loc="lower center", ncol=per_row, fontsize=11, frameon=False)
    legend_rows = math.ceil(len(handles) / per_row)
    fig.tight_layout(rect=(0, (0.35 * legend_rows + 0.15) / fig.get_size_inches()[1], 1, 1))
    fig.savefig(path, dpi=100)
    plt.close(fig)


def learning_curve(csv_path: str, title: str, path: str) -> None:
    """Every finished episode's return against env steps, and their running mean."""
    import csv

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    with open(csv_path, newline="") as file:
        rows = list(csv.DictReader(file))
    if not rows:
        raise SystemExit(f"{csv_path}: no episode")
    steps = np.array([float(r["global_step"]) for r in rows])
    returns = np.array([float(r["episodic_return"]) for r in rows])
    window = max(1, min(50, len(returns) // 10))
    smooth = np.convolve(returns, np.ones(window) / window, mode="valid")
    seconds = float(rows[-1]["seconds"])
    fig, ax = plt.subplots(figsize=(7.0, 3.6))
    ax.scatter(steps, returns, s=3, alpha=0.25, label="an episode")
    ax.plot(steps[window - 1 :], smooth, color="C1", linewidth=2, label=f"mean of {window}")
    ax.set_xlabel(f"env steps ({steps[-1]:,.0f} in {seconds:,.0f} s, learning included)", fontsize=10)
    ax.set_ylabel("episode return", fontsize=10)
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=9, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def write_all(folder: str) -> list:
    os.makedirs(folder, exist_ok=True)
    written = []
    for name, results, scenario, num_envs, title in BARS:
        path = os.path.join(folder, f"{name}.png")
        bar_chart(load(results), scenario, num_envs, title, path)
        written.append(path)
    for name, results in SWEEPS:
        path = os.path.join(folder, f"{name}.png")
        sweep_chart(load(results), path)
        written.append(path)
    for name, results, title in CURVES:
        path = os.path.join(folder, f"{name}.png")
        learning_curve(os.path.join(ROOT, "examples", "results", results), title, path)
        written.append(path)
    for name, results in SCALING:
        path = os.path.join(folder, f"{name}.png")
        scaling_chart(load(results), path)
        written.append(path)
    return written


def scaling_chart(report: dict, path: str) -> None:
    """``benchmarks/scaling.py``'s four panels per scenario, drawn by that script's own ``plot``."""
    spec = importlib.util.spec_from_file_location("scaling", os.path.join(ROOT, "benchmarks", "scaling.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.plot(report["results"], path, f"{report['machine']['cpu_model']}, {report['created'][:10]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", nargs="?", help="write every plot of the docs into this folder")
    parser.add_argument("--headline", metavar="PNG", help="write README's headline figure (Pong, 8 envs) here")
    args = parser.parse_args()
    if not args.folder and not args.headline:
        parser.error("name a folder, --headline PNG, or both")
    if args.folder:
        for path in write_all(args.folder):
            print(path)
    if args.headline:
        name, results, scenario, num_envs, title = BARS[0]
        os.makedirs(os.path.dirname(os.path.abspath(args.headline)), exist_ok=True)
        bar_chart(load(results), scenario, num_envs, title, args.headline)
        print(args.headline)


if __name__ == "__main__":
    main()
