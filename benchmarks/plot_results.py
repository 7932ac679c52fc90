"""The performance pages' plots, drawn from the benchmark results in ``benchmarks/results``.

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
PORTAL_COLOR, OTHER_COLOR, REFERENCE_COLOR = "#d62728", "#1f77b4", "#7f7f7f"


def load(name: str) -> dict:
    with open(os.path.join(RESULTS, name)) as file:
        return json.load(file)


def command_of(report: dict) -> str:
    command = report["command"]
    words = command if isinstance(command, list) else command.split()
    words = [os.path.basename(w) if w.endswith("portal-shm") else w for w in words]
    for flag in ("--json", "--table", "--plot"):  # where the run wrote its results is not what to run
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
        f"{title}: {machine.get('cpu_count', '?')} cores, {machine.get('cpu_model') or 'this VM'}", fontsize=10
    )
    fig.text(0.01, 0.01, command_of(report), fontsize=6.5, color="#555555")
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    fig.savefig(path, dpi=100)
    plt.close(fig)


def write_all(folder: str) -> list:
    from portal_shm.bench.plot import plot_report

    os.makedirs(folder, exist_ok=True)
    written = []
    for name, results, scenario, num_envs, title in BARS:
        path = os.path.join(folder, f"{name}.png")
        bar_chart(load(results), scenario, num_envs, title, path)
        written.append(path)
    for name, results in SWEEPS:
        path = os.path.join(folder, f"{name}.png")
        problem = plot_report(load(results), path)
        if problem:
            raise SystemExit(problem)
        written.append(path)
    return written


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
