"""The live progress display while a benchmark runs (rich, on stderr)."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from .runner import Progress as ProgressSink


class LiveProgress(ProgressSink):
    """One bar over every timed run; a line per finished cell above it."""

    def __init__(self, console: Console, quiet: bool = False) -> None:
        self.console, self.quiet = console, quiet
        self.progress = Progress(
            SpinnerColumn(),
            TextColumn("{task.description}", markup=False),  # scenario and env names, errors: text
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("eta"),
            TimeRemainingColumn(),
            console=console,
            transient=True,
            disable=quiet,
        )
        self.task = None
        self.cell: dict = {}

    def __enter__(self) -> "LiveProgress":
        self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._flush_cell()
        self.progress.stop()

    def start(self, total: int) -> None:
        self.task = self.progress.add_task("starting", total=total)

    def status(self, text: str) -> None:
        if self.task is not None:
            self.progress.update(self.task, description=text)

    def advance(self, sample: dict) -> None:
        key = (sample["scenario"], sample["num_envs"])
        if self.cell.get("key") != key:
            self._flush_cell()
            self.cell = {"key": key, "rates": {}}
        self.cell["rates"].setdefault(sample["system"], []).append(sample["steps_per_s"])
        if self.task is not None:
            self.progress.advance(self.task)

    def log(self, text: str) -> None:
        if not self.quiet:
            self.progress.console.print(text, highlight=False, markup=False)

    def _flush_cell(self) -> None:
        if not self.cell or self.quiet:
            return
        (scenario, n), rates = self.cell["key"], self.cell["rates"]
        parts = [f"{system} {sorted(r)[len(r) // 2]:,.0f}" for system, r in rates.items()]
        self.progress.console.print(f"[bold]{escape(scenario)}[/] N={n}: " + escape(", ".join(parts)), highlight=False)
        self.cell = {}
