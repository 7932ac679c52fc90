"""The ``portal-shm`` command: a thin layer over the library, one library call per verb."""

from __future__ import annotations

import argparse
import sys
import time
from typing import Optional

from rich.markup import escape
from rich.table import Table

from ..version import __version__
from ..wire.protocol import PROTOCOL_VERSION
from .args import add_kwarg_argument, non_negative_int, parse_kwargs, positive_int, positive_seconds
from .backend_args import BACKEND_NAMES, with_image
from .bottleneck import compare_command, verdict_lines
from .console import error_text, make_console
from .parser import Parser, UsageError

console = make_console()
err_console = make_console(stderr=True)

# The verbs as ``portal-shm --help`` (and the CLI reference page) group them; a unit test checks
# that every verb is in one group.
COMMAND_GROUPS = (
    ("step and measure envs", ("run", "bench", "tune", "top", "record")),
    ("runtimes (cached venvs and micromamba envs, leftovers)", ("env", "gc")),
    ("docker images and containers", ("build", "test", "build-run-test", "start", "ps", "logs", "stop", "agent")),
    ("envs on other machines", ("host", "keys")),
)


# What ``run --backend`` takes: the runtimes' backends (portal_shm.runtimes.registry.BACKENDS) and
# the env hosts' (``remote``, ``ray``); a unit test keeps this list equal to the registry's.
def cmd_run(args: argparse.Namespace) -> int:
    """Step ``num_envs`` envs with random actions and report throughput: the main job."""
    import numpy as np

    import portal_shm

    kwargs = with_image(args, parse_kwargs(args.kwarg))
    vector_kwargs = {"envs_per_server": args.envs_per_server} if args.envs_per_server else {}
    if args.batch_size:
        vector_kwargs["batch_size"] = args.batch_size
    started = time.perf_counter()
    with console.status(escape(f"starting {args.num_envs} x {args.id} on the {args.backend} backend")):
        envs = portal_shm.make_vec(args.id, args.num_envs, backend=args.backend, vector_kwargs=vector_kwargs, **kwargs)
    try:
        startup = time.perf_counter() - started
        console.print(
            f"[bold]{args.num_envs} x {escape(args.id)}[/] ready in {startup:.2f} s: "
            + escape(
                f"{len(envs.servers)} env servers, observation {envs.single_observation_space}, "
                f"action {envs.single_action_space}"
            )
        )
        envs.action_space.seed(args.seed)
        envs.reset(seed=args.seed)
        actions = [envs.action_space.sample() for _ in range(64)]
        steps = env_steps = episodes = 0
        returns = np.zeros(args.num_envs)
        finished: list = []
        everyone = np.arange(args.num_envs)
        begin = time.perf_counter()
        with console.status("stepping") as status:
            while time.perf_counter() - begin < args.seconds:
                _, reward, terminated, truncated, infos = envs.step(actions[steps % len(actions)])
                ids = infos.get("env_id", everyone)
                steps += 1
                env_steps += len(ids)
                returns[ids] += reward
                done = np.logical_or(terminated, truncated)
                if done.any():
                    finished.extend(returns[ids[done]].tolist())
                    returns[ids[done]] = 0
                    episodes += int(done.sum())
                if steps % 100 == 0:
                    rate = env_steps / (time.perf_counter() - begin)
                    status.update(f"stepping: {rate:,.0f} env-steps/s")
        elapsed = time.perf_counter() - begin
        stats = envs.stats(window=min(max(elapsed, 0.1), 3600.0))  # the stepping, not the start-up
    finally:
        envs.close()
    table = Table(title=escape(f"portal-shm run {args.id}"))
    for column in ("envs", "servers", "batched steps", "env-steps/s", "episodes", "mean return"):
        table.add_column(column, justify="right")
    table.add_row(
        str(args.num_envs),
        str(len(envs.servers)),
        f"{steps:,}",
        f"{env_steps / elapsed:,.0f}",
        str(episodes),
        f"{np.mean(finished):.2f}" if finished else "-",
    )
    console.print(table)
    for line in verdict_lines(stats, args.batch_size):
        console.print(escape(line), highlight=False, soft_wrap=True)
    compare = compare_command(args.id, args.num_envs, args.backend, args.batch_size, args.envs_per_server, args.image)
    console.print(f"compare: {escape(compare)}", highlight=False, soft_wrap=True)
    return 0


def cmd_gc(args: argparse.Namespace) -> int:
    """Remove run directories, containers and old-style /dev/shm names of agents that are gone."""
    from ..runtimes.gc import collect

    leftovers = collect(dry_run=args.dry_run)
    if not leftovers:
        console.print("nothing to collect: no leftovers of dead portals")
        return 0
    table = Table(title="would remove" if args.dry_run else "removed")
    for column in ("kind", "name", "owner pid", "bytes"):
        table.add_column(column)
    for item in leftovers:
        table.add_row(item.kind, escape(item.name), str(item.owner_pid), f"{item.size:,}")
    console.print(table)
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The ``portal-shm`` parser with every verb; ``Parser`` makes each verb report its own errors."""
    parser = Parser(
        prog="portal-shm",
        description="Step RL envs in isolated runtimes through shared memory.",
        epilog="portal-shm COMMAND --help shows a command's arguments. Exit status: 0 success, 1 a portal-shm "
        "error (its message on stderr), 2 a usage error, 130 interrupted.",
        command_groups=COMMAND_GROUPS,
    )
    parser.add_argument(
        "--version",
        action="version",
        version=f"portal-shm {__version__} (env-side protocol {PROTOCOL_VERSION})",
        help="show portal-shm's version and the protocol its env side speaks, then exit",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", title="commands")

    run = commands.add_parser(
        "run",
        help="step N envs with random actions and print throughput",
        description="Step N envs with random actions through a VectorPortal and print the throughput.",
        epilog="example: portal-shm run ALE/Pong-v5 --num-envs 8 --backend docker --image portal-shm/ale",
    )
    run.add_argument("id", nargs="?", default="ALE/Pong-v5", help="env id or package.module:callable")
    run.add_argument("-n", "--num-envs", type=positive_int, default=8, help="number of envs stepped together")
    run.add_argument("--seconds", type=positive_seconds, default=10.0, help="how long to step, after start-up")
    run.add_argument("--backend", default="process", choices=BACKEND_NAMES, help="where the envs run: their runtime")
    run.add_argument(
        "--image",
        default=None,
        help="docker backend: the image the envs run in, e.g. portal-shm/vizdoom (default: portal-shm/ale)",
    )
    run.add_argument(
        "--envs-per-server",
        type=positive_int,
        default=None,
        help="envs per env-server process (default: the envs spread over one server per CPU core)",
    )
    run.add_argument(
        "--batch-size",
        type=positive_int,
        default=None,
        help="async batches: step the first B envs to finish (envpool style) instead of all in lockstep "
        "(default: lockstep)",
    )
    run.add_argument(
        "--seed", type=non_negative_int, default=0, help="seed of the envs' reset and of the random actions"
    )
    add_kwarg_argument(run, "env kwarg (or backend option), typed: int, float, bool, None or str; repeatable")
    run.set_defaults(func=cmd_run)

    from ..bench.cli import add_bench_command
    from .agent import add_agent_command
    from .docker import add_docker_commands
    from .env import add_env_commands
    from .record import add_record_command
    from .remote import add_remote_commands
    from .top import add_top_command
    from .tune import add_tune_command

    # In the order of COMMAND_GROUPS, which is also the CLI reference's order.
    add_bench_command(commands)
    add_tune_command(commands)
    add_top_command(commands)
    add_record_command(commands)
    add_env_commands(commands)
    gc = commands.add_parser(
        "gc",
        help="reclaim /dev/shm segments and run dirs whose agent is dead",
        description="Remove run directories, containers and /dev/shm names of portals whose agent is gone.",
    )
    gc.add_argument("--dry-run", action="store_true", help="only list what would be removed")
    gc.set_defaults(func=cmd_gc)
    add_docker_commands(commands)
    add_agent_command(commands)
    add_remote_commands(commands)
    return parser


def _progress_lines(args: argparse.Namespace) -> None:
    """A portal's start-up progress as lines on stderr where it is no terminal (a terminal gets a
    status line: ``agent/contract/start_progress.py``); an env host logs it with the rest."""
    import logging

    log = logging.getLogger("portal_shm.start")
    if getattr(args.func, "__name__", "") != "cmd_host" and not log.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("portal-shm: %(message)s"))
        log.addHandler(handler)
        log.setLevel(logging.INFO)
        log.propagate = False


def main(argv: Optional[list] = None) -> None:
    args = build_parser().parse_args(argv)
    from ..errors import PortalError

    _progress_lines(args)

    try:
        code = args.func(args)
    except UsageError as exc:  # two flags that disagree: argparse's way, with the verb's usage, exit 2
        args.verb_parser.error(str(exc))
    except (PortalError, ValueError) as exc:
        err_console.print(error_text(str(exc)))
        code = 1
    except KeyboardInterrupt:
        err_console.print("interrupted")
        code = 130
    sys.exit(code)
