"""portal-shm bench: portal_shm side by side with the alternatives, as a table, JSON and a plot.

Wire it into the main CLI with ``add_bench_command(subparsers)``; ``python -m portal_shm.bench``
runs the same verb on its own.
"""

from __future__ import annotations

import argparse
import math
import sys
from typing import Any, Callable, Optional

from rich.console import Console
from rich.markup import escape

from .options import AGAINST, BACKENDS, BenchOptions
from .scenarios import ScenarioError, parse_scenarios

DEFAULT_SCENARIOS = ("null:210x160x3", "ALE/Pong-v5")
EPILOG = """\
scenarios: null:AxBxC (a null env returning a preallocated uint8 frame: transport cost),
training:ALE/<Game>-v5 (Atari as people train it, envpool's defaults: portals host the games in ALE's
vector env, a server per batch; envpool and ale-vector get the same settings), any gymnasium id
(ALE/Pong-v5, VizdoomBasic-v1, ...) or your own entry point package.module:callable.
systems: portal-<backend> for each --backends; --against sync (gymnasium SyncVectorEnv), async
(AsyncVectorEnv, shared_memory=True), portal-fns (VectorPortal(env_fns), the drop-in for AsyncVectorEnv),
portal-views (ring views, copy=False, beside the default's fresh arrays), envpool, ale-vector (ale_py's
AtariVectorEnv, C++ threads), portal-env (where installed; else skipped with why).
method: per (scenario, N) every system is built, then they run interleaved round by round (A B A B ...),
each run a warm-up then --seconds of random actions; game scenarios add raw (one env, plain loop) and
ceiling (one plain loop per core, summed). Ratios to --baseline are taken pair by pair per round.
Between runs the machine's CPU time is read: when other processes took enough of it to skew the figures,
the table, the JSON (load) and the plot say how much; where a game's env steps too cheaply to rank the runners
by more than their transports, one line says that too (JSON: transport_bound).
example: portal-shm bench null:210x160x3 ALE/Pong-v5 --num-envs 8 --against async --json out.json --plot out.png
"""


def _csv(text: str) -> list:
    return [s.strip() for s in text.split(",") if s.strip() and s.strip() != "none"]


def _number(kind: type, low: float, above: bool = False) -> Callable[[str], Any]:
    """``type=`` of a numeric flag: ``kind`` of at least ``low`` (greater, with ``above``), so that
    argparse names the flag and exits 2 (``portal_shm.cli.args.bounded``, which bench sits below)."""
    bound = f"{'an integer' if kind is int else 'a number'} {'greater than' if above else 'of at least'} {low:g}"

    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {bound}, got {text!r}") from None
        if not math.isfinite(value) or value < low or (above and value == low):
            raise argparse.ArgumentTypeError(f"expected {bound}, got {text!r}")
        return value

    return parse


_positive_int, _non_negative_int = _number(int, 1), _number(int, 0)
_positive_float, _non_negative_float = _number(float, 0, above=True), _number(float, 0)


def _ints(text: str) -> list:
    """``4,8``: positive integers (numbers of envs), sorted, each once."""
    return sorted({_positive_int(v) for v in _csv(text)})


def _choices(allowed: tuple):
    def parse(text: str) -> list:
        values = list(dict.fromkeys(_csv(text)))
        unknown = [v for v in values if v not in allowed]
        if unknown:
            raise argparse.ArgumentTypeError(f"unknown {unknown}; choose from {','.join(allowed)}")
        return values

    return parse


def _limit(text: str) -> tuple:
    key, sep, values = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected NAME=N1,N2 (a scenario or system name), got {text!r}")
    return key, _ints(values)


def configure_parser(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "scenarios",
        nargs="*",
        metavar="SCENARIO",
        help=f"null:AxBxC, training:ALE/<Game>-v5, a gymnasium id or module:callable (default: {' '.join(DEFAULT_SCENARIOS)})",
    )
    p.add_argument("-n", "--num-envs", type=_ints, default=[8], metavar="N,N", help="comma list of N (default 8)")
    p.add_argument(
        "--backends",
        type=_choices(BACKENDS),
        default=["process"],
        metavar="B,B",
        help=f"portal_shm backends to run, of {','.join(BACKENDS)} (default process)",
    )
    p.add_argument(
        "--against",
        type=_choices(AGAINST),
        default=["sync", "async"],
        metavar="S,S",
        help=f"alternatives, of {','.join(AGAINST)}, or none (default sync,async)",
    )
    p.add_argument("--baseline", help="system the ratios are taken to (default async if run, else the first system)")
    p.add_argument("--seconds", type=_positive_float, default=2.0, help="timed seconds per run (default 2)")
    p.add_argument("--repeat", type=_positive_int, default=3, help="interleaved rounds per cell (default 3)")
    p.add_argument(
        "--warmup", type=_non_negative_int, default=10, help="untimed batched steps before each run (default 10)"
    )
    p.add_argument(
        "--alloc-steps",
        type=_non_negative_int,
        default=200,
        help="portal steps under tracemalloc (default 200, 0 skips)",
    )
    p.add_argument(
        "--batch-size",
        type=_positive_int,
        default=None,
        help="async batches (envpool style: recv the first B envs done, send them back) for the systems that "
        "have them (portal-process, portal-docker, envpool); the others step in lockstep; "
        "portal-lockstep and envpool-lockstep in --against set lockstep beside them",
    )
    p.add_argument(
        "--envs-per-server", type=_positive_int, default=None, help="portal's envs_per_server (default: its own)"
    )
    p.add_argument("--image", default=None, help="docker image for scenarios with no known image")
    p.add_argument(
        "--rtt-ms",
        type=_non_negative_float,
        default=0.0,
        help="remote systems: emulate a link of this round trip in front of the host (default none)",
    )
    p.add_argument(
        "--rate-mbit",
        type=_positive_float,
        default=None,
        help="remote systems: the emulated link's bandwidth each way, Mbit/s (default unlimited)",
    )
    p.add_argument(
        "--compression",
        default="auto",
        choices=("auto", "none", "lz4", "zstd"),
        help="remote systems: compression of observations (default auto: off on loopback)",
    )
    p.add_argument(
        "--limit",
        type=_limit,
        action="append",
        default=[],
        metavar="NAME=N,N",
        help="run scenario or system NAME only at these N, e.g. --limit portal-docker=8 (repeatable)",
    )
    p.add_argument("--no-references", action="store_true", help="skip the raw and ceiling loops")
    p.add_argument("--seed", type=_non_negative_int, default=0, help="seed of resets and action samples (default 0)")
    p.add_argument("--json", metavar="FILE", help="write the report (schema: benchmarks/SCHEMA.md)")
    p.add_argument(
        "--plot",
        metavar="FILE.png",
        help="write steps/s against N, one line per system; a scenario run at one N gets a bar per system (matplotlib)",
    )
    p.add_argument("--table", metavar="FILE", help="write the final table as plain text")
    p.add_argument("--markdown", metavar="FILE", help="write the summary as a Markdown table")
    p.add_argument("-q", "--quiet", action="store_true", help="no live progress display")
    p.set_defaults(func=cmd_bench, bench_parser=p)


def add_bench_command(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "bench",
        help="benchmark portal_shm against the alternatives (table, JSON, plot)",
        description=__doc__.split("\n\n")[0],
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    configure_parser(p)


def options_from_args(args: argparse.Namespace) -> BenchOptions:
    return BenchOptions(
        scenarios=parse_scenarios(args.scenarios or list(DEFAULT_SCENARIOS)),
        num_envs=args.num_envs,
        backends=args.backends,
        against=args.against,
        baseline=args.baseline,
        seconds=args.seconds,
        repeat=args.repeat,
        warmup=args.warmup,
        alloc_steps=args.alloc_steps,
        seed=args.seed,
        envs_per_server=args.envs_per_server,
        image=args.image,
        batch_size=args.batch_size,
        references=not args.no_references,
        limits=dict(args.limit),
        rtt_ms=args.rtt_ms,
        rate_mbit=args.rate_mbit,
        compression=args.compression,
    )


def cmd_bench(args: argparse.Namespace) -> int:
    from .live import LiveProgress
    from .plot import plot_report
    from .report import write_json
    from .runner import BenchError, run_bench
    from .table import print_report, render_markdown, render_text

    parser = args.bench_parser
    try:
        options = options_from_args(args)
    except ScenarioError as exc:
        parser.error(str(exc))
    console, err_console = Console(), Console(stderr=True)
    if not console.is_terminal:  # piped or redirected: the table's full width, not 80 columns
        console = Console(width=170)
    try:
        with LiveProgress(err_console, quiet=args.quiet) as progress:
            report = run_bench(options, progress, command=getattr(args, "command_line", None) or list(sys.argv))
    except BenchError as exc:
        parser.error(str(exc))
    print_report(report, console)
    if args.json:
        write_json(report, args.json)
        err_console.print(f"wrote {args.json}", highlight=False)
    if args.table:
        with open(args.table, "w") as f:
            f.write(render_text(report))
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(render_markdown(report))
    if args.plot:
        note = plot_report(report, args.plot)
        err_console.print(note or f"wrote {args.plot}", highlight=False)
    return 130 if report["interrupted"] else 0


def main(argv: Optional[list] = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m portal_shm.bench",
        description=__doc__.split("\n\n")[0],
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    configure_parser(parser)
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parser.parse_args(argv)
    args.command_line = ["python", "-m", "portal_shm.bench"] + argv
    from portal_shm.errors import PortalError

    try:
        return args.func(args)
    except PortalError as exc:
        Console(stderr=True).print("[bold red]error:[/]", escape(str(exc)), highlight=False)
        return 1
