"""``portal-shm tune ENV -n N``: measure which ``vector_kwargs`` step ENV fastest here, print them
and write them for ``make_vec(tune=FILE)``. One library call: ``portal_shm.bench.tune.tune``."""

from __future__ import annotations

import argparse
import json
import sys

from rich.markup import escape
from rich.table import Table

from .args import (
    add_kwarg_argument,
    non_negative_float,
    non_negative_int,
    parse_kwargs,
    positive_int,
    positive_seconds,
)
from .backend_args import BACKEND_NAMES, with_image
from .console import make_console
from .parser import HelpFormatter, UsageError

console = make_console()
err_console = make_console(stderr=True)

EPILOG = """\
searches envs_per_server (divisors of N, at most two servers per core) x lockstep and, with --batch,
async batch sizes (whole servers, at most four batches in flight) x spin_wait (default, 0) x
ring_depth (4, 2): every layout screened in one short run, then the spin and ring settings of the
best two, then the best --refine points and the default layout in --rounds interleaved rounds.
example: portal-shm tune ALE/Pong-v5 -n 16 --batch --policy-ms 2 --write pong16.json
apply:   portal_shm.make_vec("ALE/Pong-v5", 16, tune="pong16.json")
"""


def _ints(text: str) -> list:
    """``2,4``: positive integers, sorted, each once."""
    return sorted({positive_int(v.strip()) for v in text.split(",") if v.strip()})


def _spins(text: str) -> list:
    """``default,0``: the portal's default spin and seconds (``200e-6``)."""
    values: list = []
    for item in (v.strip() for v in text.split(",")):
        if not item:
            continue
        try:
            value = None if item == "default" else float(item)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected default or seconds (0, 200e-6), got {item!r}") from None
        if value is not None and value < 0:
            raise argparse.ArgumentTypeError(f"spin_wait is seconds, at least 0: got {item!r}")
        values.append(value)
    return values


def add_tune_command(subparsers: argparse._SubParsersAction) -> None:
    from ..bench.tune import TuneOptions

    p = subparsers.add_parser(
        "tune",
        help="measure the fastest vector_kwargs for an env on this machine and write them",
        description="Search envs_per_server x batch_size x spin_wait x ring_depth for ENV at N envs on this "
        "machine within a time budget; print the winner as vector_kwargs and --write it for "
        "make_vec(tune=FILE).",
        epilog=EPILOG,
        formatter_class=_EpilogFormatter,
    )
    p.add_argument("id", metavar="ENV", help="env id or package.module:callable")
    p.add_argument("-n", "--num-envs", type=positive_int, required=True, help="number of envs the portal will step")
    p.add_argument("--backend", default="process", choices=BACKEND_NAMES, help="where the envs run: their runtime")
    p.add_argument("--image", default=None, help="docker backend: the image the envs run in (default: portal-shm/ale)")
    add_kwarg_argument(p, "env kwarg (or backend option), typed: int, float, bool, None or str; repeatable")
    p.add_argument(
        "--policy-ms",
        type=non_negative_float,
        default=TuneOptions.policy_ms,
        help="the agent's compute per step()/recv(), busy-waited (it holds a core, as a policy forward does)",
    )
    p.add_argument(
        "--batch",
        action="store_true",
        help="search async batch sizes too (only if your loop uses send/recv; default: lockstep layouts only)",
    )
    p.add_argument(
        "--budget-s",
        type=positive_seconds,
        default=TuneOptions.budget_s,
        help="wall-clock seconds the whole search may take",
    )
    p.add_argument("--write", metavar="FILE", default=None, help="write the tuning (JSON) for make_vec(tune=FILE)")
    p.add_argument(
        "--envs-per-server",
        type=_ints,
        default=None,
        metavar="E,E",
        help="only these envs per server (default: divisors of N, at most two servers per core)",
    )
    p.add_argument(
        "--batch-sizes",
        type=_ints,
        default=None,
        metavar="B,B",
        help="with --batch, only these batch sizes (default: whole servers, at most four batches in flight)",
    )
    p.add_argument(
        "--spin-wait",
        type=_spins,
        default=None,
        metavar="S,S",
        help="spin settings to try, 'default' or seconds (default: default,0)",
    )
    p.add_argument("--ring-depth", type=_ints, default=None, metavar="D,D", help="ring depths to try (default: 4,2)")
    p.add_argument(
        "--refine",
        type=positive_int,
        default=TuneOptions.refine,
        help="how many of the best screened points are refined (and make_vec's own layout beside them)",
    )
    p.add_argument(
        "--rounds", type=positive_int, default=TuneOptions.rounds, help="interleaved rounds of the refine pass"
    )
    p.add_argument("--seed", type=non_negative_int, default=0, help="seed of the resets and the random actions")
    p.add_argument("-q", "--quiet", action="store_true", help="no live progress display")
    p.set_defaults(func=cmd_tune)


class _EpilogFormatter(HelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Every flag's default shown (``parser.HelpFormatter``), the epilog's lines kept as written."""


def cmd_tune(args: argparse.Namespace) -> int:
    """Run the search with a live bar, print every point and the winner, write the JSON."""
    from ..bench.live import LiveProgress
    from ..bench.report import write_json
    from ..bench.tune import TuneError, TuneOptions, tune

    options = TuneOptions(
        env_id=args.id,
        num_envs=args.num_envs,
        backend=args.backend,
        make_kwargs=with_image(args, parse_kwargs(args.kwarg)),
        policy_ms=args.policy_ms,
        batch=args.batch,
        budget_s=args.budget_s,
        envs_per_server=args.envs_per_server,
        batch_sizes=args.batch_sizes,
        spin_waits=args.spin_wait,
        ring_depths=args.ring_depth,
        refine=args.refine,
        rounds=args.rounds,
        seed=args.seed,
    )
    try:
        options.validate()
    except TuneError as exc:
        raise UsageError(str(exc)) from None
    with LiveProgress(err_console, quiet=args.quiet) as progress:
        report = tune(options, progress)  # a search in which nothing could run: TuneError, exit status 1
    report["command"] = ["portal-shm", *sys.argv[1:]]
    print_tuning(report)
    if args.write:
        write_json(report, args.write)
        err_console.print(f"wrote {args.write}", highlight=False, markup=False)
        console.print(
            f"apply: portal_shm.make_vec({args.id!r}, {args.num_envs}, tune={args.write!r})",
            highlight=False,
            markup=False,
        )
    return 0


def print_tuning(report: dict) -> None:
    """Every point measured, best first, then the winner's ``vector_kwargs`` and how to apply them."""
    table = Table(
        title=escape(f"portal-shm tune {report['env_id']} -n {report['num_envs']} ({report['wall_s']:.0f} s)")
    )
    for column in ("layout", "phase", "screen steps/s", "refined steps/s", "rounds", "startup s"):
        table.add_column(column, justify="left" if column in ("layout", "phase") else "right")

    def key(entry: dict) -> tuple:
        return (entry["refine_steps_per_s"] is not None, entry["steps_per_s"] or 0.0)

    for entry in sorted(report["measured"], key=key, reverse=True):
        name = escape(entry["label"] + (" (default)" if entry["default"] else ""))
        refined = entry["refine_steps_per_s"]
        table.add_row(
            f"[bold green]{name}[/]" if entry["winner"] else name,
            escape(entry["phase"] if not entry["error"] else f"failed: {entry['error'][:60]}"),
            f"{entry['screen_steps_per_s']:,.0f}" if entry["screen_steps_per_s"] else "-",
            f"{refined:,.0f}" if refined else "-",
            " ".join(f"{r / 1e3:.1f}k" for r in entry["refine_rounds"]) or "-",
            f"{entry['startup_s']:.2f}" if entry["startup_s"] else "-",
        )
    console.print(table)
    default = report["default"]
    versus = f", {default['x_default']:.2f}x the default layout" if default.get("x_default") else ""
    console.print(
        f"winner: [bold]{escape(report['label'])}[/], {report['steps_per_s']:,.0f} env-steps/s{versus}", highlight=False
    )
    console.print("vector_kwargs = " + json.dumps(report["vector_kwargs"]), highlight=False, markup=False)
