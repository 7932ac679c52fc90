"""The report as people read it: a rich table on the terminal, the same as plain text, and a
Markdown table for the README."""

from __future__ import annotations

import io
from typing import Optional

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from .options import is_portal

COLUMNS = (
    "scenario",
    "N",
    "system",
    "env-steps/s median [min-max]",
    "x {baseline}",
    "x ceiling",
    "p50 us",
    "p99 us",
    "agent CPU",
    "CPU s/1k steps",
    "obs allocs",
    "start s",
)


def _num(value: Optional[float], spec: str) -> str:
    return "-" if value is None else format(value, spec)


def _spread(spread: Optional[dict], spec: str, with_range: bool = True) -> str:
    if not spread:
        return "-"
    text = format(spread["median"], spec)
    if with_range and spread["n"] > 1:
        text += f" [{format(spread['min'], spec)}-{format(spread['max'], spec)}]"
    return text


def _cells(row: dict) -> list:
    alloc = row["alloc"]
    return [
        row["scenario"],
        str(row["num_envs"]),
        row["system"],
        _spread(row["steps_per_s"], ",.0f"),
        _spread(row["x_baseline"], ".2f", with_range=False),
        _spread(row["x_ceiling"], ".2f", with_range=False),
        _num(row["p50_us"], ",.0f"),
        _num(row["p99_us"], ",.0f"),
        _num(row["agent_cpu"], ".2f"),
        _num(row.get("cpu_s_per_1k_steps"), ".3g"),
        "-" if not alloc else f"{alloc['steps_with_obs_sized_alloc']}/{alloc['steps']}",
        _num(row.get("startup_s"), ".1f"),
    ]


def rich_table(report: dict) -> Table:
    baseline = report["options"]["baseline"]
    table = Table(
        title=f"portal-shm bench: env-steps/s, median of {report['options']['repeat']} interleaved runs "
        f"of {report['options']['seconds']:g} s"
    )
    for i, column in enumerate(COLUMNS):
        table.add_column(escape(column.format(baseline=baseline)), justify="left" if i in (0, 2) else "right")
    previous = None
    for row in report["summary"]:
        key = (row["scenario"], row["num_envs"])
        if previous is not None and key != previous:
            table.add_section()
        previous = key
        style = "bold" if is_portal(row["system"]) else ("dim" if row["system"] in ("raw", "ceiling") else None)
        table.add_row(*(escape(cell) for cell in _cells(row)), style=style)  # "[min-max]", names: text
    return table


def footer_lines(report: dict) -> list:
    options, machine = report["options"], report["machine"]
    lines = [
        f"x {options['baseline']}: median over rounds of (system run i / {options['baseline']} run i), "
        "runs interleaved round by round; x ceiling: the same against the ceiling.",
        f"raw: one env in a plain loop in this process; ceiling: {machine['cpu_count']} such loops in parallel "
        "processes, summed (game scenarios only). p50/p99: per batched step. agent CPU: CPU seconds of the "
        "agent process (all its threads) per wall second. CPU s/1k steps: CPU seconds of the agent and every "
        "process working for it (env servers, workers, containers) per 1,000 env steps. obs allocs: portal steps that allocated >= one "
        "observation (tracemalloc). start s: seconds to build and reset the system (raw: the single env "
        "and the ceiling processes).",
        f"machine: {machine['cpu_model']}, {machine['cpu_count']} cores, "
        f"{(machine['mem_total_bytes'] or 0) / 2**30:.0f} GiB, Python {machine['python']}"
        + (
            f", CPU steal {machine['cpu_steal_share']:.0%} during the run"
            if machine.get("cpu_steal_share") is not None
            else ""
        )
        + (
            f", other processes {report['load']['other_cores']:.1f} cores on average during the run"
            if report.get("load")
            else ""
        ),
    ]
    versions = ", ".join(f"{k} {v}" for k, v in machine["versions"].items() if v)
    lines.append(f"versions: {versions}")
    for s in report["skipped"]:
        at = "" if s["num_envs"] is None else f" N={s['num_envs']}"
        lines.append(f"skipped {s['system']} on {s['scenario']}{at}: {s['reason']}")
    for e in report["errors"]:
        lines.append(f"error {e['system']} on {e['scenario']} N={e['num_envs']} round {e['round']}: {e['error']}")
    for n in report["notes"]:
        lines.append(f"note {n['system']} on {n['scenario']}: {n['note']}")
    for t in report["targets"]:
        lines.append(f"{'PASS' if t['ok'] else 'FAIL'}  {t['target']}  (measured {t['value']:.2f})")
    if report["leftover_shm"]:
        lines.append(f"leftover /dev/shm entries of this process: {report['leftover_shm']}")
    if report["interrupted"]:
        lines.append("interrupted: partial results")
    return lines


def meaning_lines(report: dict) -> list:
    """What to read the figures as: ``(style, line)`` for other work that skewed the run and for
    each scenario whose env is too cheap to tell runners apart by anything but their transports."""
    lines = []
    load = report.get("load") or {}
    if load.get("warning"):
        lines.append(("bold yellow", f"warning: {load['warning']}"))
    for found in report.get("transport_bound") or []:
        lines.append(("bold", found["text"]))
    return lines


def print_report(report: dict, console: Console) -> None:
    console.print(rich_table(report))
    for style, line in meaning_lines(report):
        console.print(line, style=style, highlight=False, markup=False, soft_wrap=True)
    for line in footer_lines(report):
        console.print(line, highlight=False, markup=False, soft_wrap=True)


def render_text(report: dict, width: int = 160) -> str:
    """The table and its footer as plain text, as ``print_report`` shows them."""
    console = Console(file=io.StringIO(), width=width, record=True, color_system=None)
    print_report(report, console)
    return console.export_text()


def render_markdown(report: dict, num_envs: Optional[list] = None) -> str:
    """A Markdown table of the summary (optionally only some N), for the README."""
    baseline = report["options"]["baseline"]
    header = [c.format(baseline=baseline) for c in COLUMNS]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(["---"] * 3 + ["---:"] * (len(header) - 3)) + "|"]
    for row in report["summary"]:
        if num_envs is None or row["num_envs"] in num_envs:
            cells = _cells(row)
            if is_portal(row["system"]):
                cells[2] = f"**{cells[2]}**"
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
