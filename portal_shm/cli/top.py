"""``portal-shm top``: a live view of every portal on this machine, from what they publish.

Reading is ``top_model``'s; this module draws it with rich and runs the loop: refresh every
``--interval`` seconds, quit on ``q`` (the terminal in cbreak mode, restored on every exit,
Ctrl-C included). Off a terminal, or with ``--once``/``--json``, it prints one snapshot, so the
same verb serves a person watching a run and a script or a bug report capturing one.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import select
import sys
import termios
import time
import tty
from typing import Any, Iterator, Optional

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from .args import bounded, non_negative_int
from .bottleneck import next_step
from .console import make_console
from .top_model import ONCE_WAIT_S, PortalView, Rates, TopModel, number, sparkline

# Portals report once a second: the view refreshes at least that often, so it never lags a report
# (and never lets a watch lapse, which portals drop after publish.WATCHED_S).
MIN_INTERVAL_S = 0.1
MAX_INTERVAL_S = 1.0
VERDICT_STYLE = {"agent": "cyan", "straggler": "bold red", "env": "yellow", "transport": "magenta"}
NO_PORTALS = "no portals running on this machine (as this user): start one with portal_shm.make_vec(...)"


def _fmt(value: Any, spec: str = ",.0f") -> str:
    x = number(value)
    return "-" if x is None else f"{x:{spec}}"


def _share(value: Any) -> str:
    x = number(value)
    return "-" if x is None else f"{x:.0%}"


def _header(view: PortalView, rates: Optional[Rates], live: bool) -> Text:
    """Who the portal is; when it reports, its rate, the agent's shares, the verdict with its why and
    the next step it calls for."""
    info, stats = view.info, view.stats or {}
    text = Text()
    if info.get("env_id"):
        text.append(str(info["env_id"]), style="bold")
        num_envs, batch = info.get("num_envs"), info.get("batch_size")
        text.append(f" x {num_envs}")
        text.append(f"  batches of {batch}" if batch and batch != num_envs else "  lockstep")
        text.append("  ")
    text.append(f"{view.tag}  pid {view.pid}", style="dim")
    if view.state != "live":
        if live and view.watched_s < ONCE_WAIT_S:
            text.append("  waiting for its first report (one a second while it steps)", style="dim")
        else:
            age = "no report yet" if view.age_s is None else f"last report {view.age_s:.0f} s ago"
            text.append(f"  idle: not stepping ({age})", style="dim")
        return text
    agent = stats.get("agent") or {}
    text.append(f"\n  {_fmt(stats.get('steps_per_s'))} env-steps/s", style="bold green")
    text.append(f" over {_fmt(stats.get('window_s'), '.0f')} s")
    if rates is not None and rates.portal:
        text.append(f" {sparkline(rates.portal)}", style="green")
    text.append(f"  agent inside {_share(agent.get('inside'))} / away {_share(agent.get('away'))}")
    text.append(f"  ring {_fmt((number((stats.get('ring') or {}).get('bytes_per_s')) or 0) / 2**20, '.1f')} MiB/s")
    bound = stats.get("bound") or {}
    what = bound.get("verdict")
    text.append("\n  verdict ")
    text.append(str(what or "none yet"), style=VERDICT_STYLE.get(str(what), "dim"))
    if bound.get("why"):
        text.append(f": {bound['why']}")
    step = next_step(stats, number(info.get("batch_size")) and int(info["batch_size"]))
    if step:
        text.append("\n  next step ")
        text.append(step)
    return text


_QUOTA_ROWS = (
    ("sessions", "--max-sessions", False),
    ("envs", "--max-envs", False),
    ("fds", "--max-fds", False),
    ("unacked_bytes", "--max-unacked-bytes", True),
)


def _host(view: PortalView) -> RenderableType:
    """An env host (``portal-shm host``): its usage against each limit, and per agent key."""
    info, stats = view.info, view.stats or {}
    text = Text()
    text.append(f"env host {info.get('name', '?')}", style="bold")
    text.append(f" at {info.get('address', '?')}  {view.tag}  pid {view.pid}", style="dim")
    if view.state != "live":
        text.append("  (no fresh report)", style="dim")
        return text
    quota = stats.get("quota") or {}
    table = Table(box=None, pad_edge=False, header_style="bold")
    for column in ("limit", "used", "of", "flag"):
        table.add_column(column, justify="right" if column in ("used", "of") else "left")
    for key, flag, size in _QUOTA_ROWS:
        pair = quota.get(key)
        if not isinstance(pair, list) or len(pair) != 2:
            continue
        used, top = (number(v) or 0 for v in pair)
        shown = (f"{used / 2**20:.1f} MiB", f"{top / 2**20:.0f} MiB") if size else (f"{used:.0f}", f"{top:.0f}")
        style = "red" if top and used >= 0.9 * top else ""
        table.add_row(key.replace("_", " ") + (" (most of a session)" if size else ""), *shown, flag, style=style)
    keys = stats.get("keys") or {}
    per = stats.get("per_agent") or {}
    by_key = Table(box=None, pad_edge=False, header_style="bold")
    for column in ("agent key", "sessions", "envs", "unacked MiB", "refused"):
        by_key.add_column(column, justify="left" if column == "agent key" else "right")
    for name, entry in sorted(keys.items()) if isinstance(keys, dict) else ():
        if not isinstance(entry, dict):
            continue
        by_key.add_row(
            escape(str(name)[:40]),
            f"{number(entry.get('sessions')) or 0:.0f}/{number(per.get('sessions')) or 0:.0f}",
            f"{number(entry.get('envs')) or 0:.0f}/{number(per.get('envs')) or 0:.0f}",
            f"{(number(entry.get('unacked_bytes')) or 0) / 2**20:.1f}",
            f"{number(entry.get('refused')) or 0:.0f}",
        )
    return Group(text, table, by_key) if keys else Group(text, table)


def _table(view: PortalView, rates: Optional[Rates], max_envs: int) -> Table:
    """Per server its rate and load, under it its envs' rates and latencies; stragglers in red."""
    stats = view.stats or {}
    slow = set((stats.get("bound") or {}).get("envs") or [])
    spark = rates is not None
    table = Table(box=None, pad_edge=False, header_style="bold")
    table.add_column("where")
    for name in ("steps/s", "p50 µs", "p90 µs", "p99 µs", "episodes", "restarts", "busy", "CPU", "RSS MB"):
        table.add_column(name, justify="right")
    if spark:
        table.add_column("steps/s, last reports")
    envs = {e.get("env"): e for e in stats.get("envs") or [] if isinstance(e, dict)}
    shown = 0
    for server in stats.get("servers") or []:
        index = server.get("server")
        row = [
            f"server {index}" + (f" (pid {server['pid']})" if server.get("pid") else ""),
            _fmt(server.get("steps_per_s")),
            "",
            "",
            "",
            "",
            "",
            _share(server.get("busy")),
            _share(server.get("cpu")),
            _fmt(server.get("rss_mb"), ".0f"),
        ]
        if spark:
            row.append(sparkline(rates.servers.get(index, [])) if rates else "")
        table.add_row(*row, style="bold")
        for i in server.get("envs") or []:
            env = envs.get(i)
            if env is None or (shown >= max_envs and i not in slow):
                continue
            shown += 1
            latency = env.get("latency_us") or {}
            row = [
                f"  env {i}" + (" (straggler)" if i in slow else ""),
                _fmt(env.get("steps_per_s")),
                _fmt(latency.get("p50"), ",.1f"),
                _fmt(latency.get("p90"), ",.1f"),
                _fmt(latency.get("p99"), ",.1f"),
                _fmt(env.get("episodes")),
                _fmt(env.get("restarts")),
                "",
                "",
                "",
            ]
            if spark:
                row.append(sparkline(rates.envs.get(i, [])) if rates else "")
            table.add_row(*row, style="bold red" if i in slow else None)
    hidden = len(envs) - shown
    if hidden > 0:
        table.add_row(f"  ... {hidden} more envs (--max-envs)", style="dim")
    return table


def render(views: list[PortalView], model: TopModel, max_envs: int, live: bool) -> RenderableType:
    """The whole screen: a title line, then per portal its header and (when it reports) its table."""
    if not views:
        return Text(NO_PORTALS)
    stepping = sum(view.state == "live" for view in views)
    parts: list[RenderableType] = [
        Text(
            f"portal-shm top: {len(views)} portal(s), {stepping} stepping"
            + ("   (q quits)" if live else f"   {time.strftime('%Y-%m-%d %H:%M:%S')}"),
            style="bold",
        )
    ]
    previous = None
    for view in sorted(views, key=lambda v: v.state != "live"):  # stepping portals first, idle ones a line each
        rates = model.rates.get(view.tag) if live else None  # a snapshot has no history to draw
        if view.state == "live" or previous != "idle":
            parts.append(Text(""))
        if view.info.get("kind") == "host":
            parts.append(_host(view))
            previous = view.state
            continue
        parts.append(_header(view, rates, live))
        if view.state == "live":
            parts.append(_table(view, rates, max_envs))
        previous = view.state
    return Group(*parts)


def snapshot_json(views: list[PortalView]) -> str:
    """The snapshot ``--json`` prints: every portal with its state and last fresh report."""
    return json.dumps({"time": time.time(), "portals": [view.as_json() for view in views]}, indent=1)


@contextlib.contextmanager
def cbreak(fd: Optional[int]) -> Iterator[None]:
    """Keys without Enter and without echo for the block; the terminal as it was afterwards (also on
    Ctrl-C: cbreak keeps signals, so Ctrl-C still interrupts). ``None``: no terminal to set."""
    if fd is None:
        yield
        return
    saved = termios.tcgetattr(fd)
    try:
        tty.setcbreak(fd, termios.TCSANOW)
        yield
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)


def wait_for_quit(fd: Optional[int], seconds: float) -> bool:
    """Wait ``seconds`` for a key on ``fd``; True when it was ``q`` (or the terminal closed)."""
    end = time.monotonic() + seconds
    while True:
        left = end - time.monotonic()
        if left <= 0:
            return False
        if fd is None:
            time.sleep(left)
            return False
        ready, _, _ = select.select([fd], [], [], left)
        if ready:
            key = os.read(fd, 32)
            if not key or b"q" in key.lower():
                return True


def run_live(console: Console, model: TopModel, interval: float, max_envs: int) -> int:
    """The live view until ``q`` or Ctrl-C; the alternate screen, so the shell's screen comes back."""
    fd = sys.stdin.fileno() if sys.stdin is not None and sys.stdin.isatty() else None
    try:
        with cbreak(fd), Live(console=console, screen=True, auto_refresh=False) as live:
            while True:
                views = model.refresh()
                live.update(render(views, model, max_envs, live=True), refresh=True)
                if wait_for_quit(fd, interval):
                    return 0
    except KeyboardInterrupt:
        return 0


def cmd_top(args: argparse.Namespace) -> int:
    """Watch every portal on this machine: live on a terminal, one snapshot otherwise."""
    console = make_console()
    model = TopModel()
    if args.once or args.json or not console.is_terminal:
        views = model.snapshot()
        if args.json:
            print(snapshot_json(views))
        elif not views:
            console.print(NO_PORTALS, soft_wrap=True, highlight=False)
        else:
            console.print(render(views, model, args.max_envs, live=False))
        return 0
    return run_live(console, model, args.interval, args.max_envs)


def add_top_command(commands: Any) -> None:
    """``portal-shm top`` on the verbs' subparsers (``commands``)."""
    top = commands.add_parser(
        "top",
        help="live view of every portal on this machine: rates, latencies, the bottleneck verdict",
        description="Watch every portal running on this machine (as this user): env-steps/s, per server and env "
        "rate, step latency, episodes, restarts, busy/CPU share, RSS and the bottleneck verdict of envs.stats(). "
        "Read-only: it touches each portal's top.watch and reads the stats.json the portal then writes once a "
        "second. On a terminal it refreshes until q; piped, or with --once/--json, it prints one snapshot.",
        epilog="example: portal-shm top --once",
    )
    top.add_argument(
        "--interval",
        type=bounded(float, MIN_INTERVAL_S, MAX_INTERVAL_S, what="seconds"),
        default=1.0,
        help=f"seconds between refreshes of the live view, {MIN_INTERVAL_S} to {MAX_INTERVAL_S} (portals report "
        "once a second, and the view refreshes at least as often)",
    )
    top.add_argument("--once", action="store_true", help="print one snapshot and exit (default off a terminal)")
    top.add_argument("--json", action="store_true", help="print one snapshot as JSON and exit")
    top.add_argument(
        "--max-envs",
        type=non_negative_int,
        default=16,
        help="env rows shown per portal; stragglers always show, 0 shows servers only",
    )
    top.set_defaults(func=cmd_top)
