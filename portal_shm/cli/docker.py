"""``portal-shm`` verbs for images and containers: build, ps, logs, stop, test, build-run-test."""

from __future__ import annotations

import argparse
import re
import time
from pathlib import Path
from typing import Any

from rich.markup import escape
from rich.table import Table

from .args import add_kwarg_argument, parse_kwargs, positive_int
from .console import error_text, make_console
from .parser import UsageError

console = make_console()
err_console = make_console(stderr=True)
SUMMARY_CHARS = 90  # of an image's description in ``build --list``


class BuildProgress:
    """Shows an image build as it goes: on a terminal a spinner with the current step, the time
    and the latest line of output; in a file or pipe each step as a line (a CI log shows where a
    slow build is)."""

    def __init__(self, target: str, status: Any) -> None:
        self.target = target
        self.status = status
        self.step = ""
        self.started = time.perf_counter()

    def __call__(self, line: str) -> None:
        if line.startswith("Step ") or line.startswith("I: "):
            self.step = line[:120]
            if not console.is_terminal:
                console.print(f"building {self.target}: {self.step}", highlight=False, markup=False)
        elapsed = time.perf_counter() - self.started
        latest = "" if line == self.step else f"\n  [dim]{escape(line.strip()[:120])}[/]"
        self.status.update(f"building {escape(self.target)} ({elapsed:.0f} s): {escape(self.step)}{latest}")


def image_summary(dockerfile: Path) -> tuple:
    """``(default env, what it holds)`` of a built-in image: its ``portal-shm.default-env`` label and
    the first sentence of the Dockerfile's opening comment, cut to ``SUMMARY_CHARS``."""
    text = dockerfile.read_text()
    label = re.search(r'portal-shm\.default-env="([^"]*)"', text)
    comment = []
    for line in text.splitlines():
        if not line.startswith("#") or line.startswith("# Build:"):
            break
        comment.append(line.lstrip("#").strip())
    summary = re.split(r"(?<=[^.]\.)\s+(?=[A-Z])", " ".join(comment))[0]
    if len(summary) > SUMMARY_CHARS:
        summary = summary[: SUMMARY_CHARS - 3].rsplit(" ", 1)[0] + "..."
    return (label.group(1) if label else "-"), summary


def list_images() -> int:
    """One line per built-in image (package data of the installed portal-shm): name, default env, summary."""
    from ..runtimes.image_build import builtin_images, builtin_images_dir

    root = builtin_images_dir()
    names = builtin_images()
    if root is None or not names:
        err_console.print(
            error_text("no built-in images: the package's images/ folder is missing (reinstall portal-shm)")
        )
        return 1
    rows = [(name, *image_summary(root / name / "Dockerfile")) for name in names]
    widths = [max(len(row[i]) for row in rows) for i in range(2)]
    for name, env, summary in rows:
        line = f"{name:<{widths[0]}}  {env:<{widths[1]}}  {summary}"
        console.print(line, highlight=False, markup=False, soft_wrap=True)
    return 0


def cmd_build(args: argparse.Namespace) -> int:
    from ..runtimes.image_build import DEFAULT_BASE, build_base, build_image

    if args.list:
        return list_images()
    if args.target is None:
        raise UsageError("name what to build (NAME|DIR|base), or --list the built-in images")
    with console.status(escape(f"building {args.target}")) as status:
        show = BuildProgress(args.target, status)
        if args.target == "base":
            tag = build_base(
                args.tag or (DEFAULT_BASE if args.suite == "bookworm" else f"portal-shm/base:{args.suite}"),
                suite=args.suite,
                on_line=show,
            )
        else:
            tag = build_image(args.target, args.tag, args.base, on_line=show)
    console.print(f"[green]built[/] {escape(tag)} in {time.perf_counter() - show.started:.0f} s")
    args.built_tag = tag
    return 0


def cmd_ps(args: argparse.Namespace) -> int:
    from ..runtimes.containers import list_containers

    table = Table(title="portal-shm containers")
    for column in ("role", "name", "id", "image", "status", "owner pid / address", "portal", "server"):
        table.add_column(column)
    for info in list_containers():
        owner = (
            info.address if info.role == "listener" else f"{info.owner_pid}" + ("" if info.owner_alive else " (gone)")
        )
        cells = (info.role, info.name, info.short_id, info.image, info.status, owner, info.portal, info.server)
        table.add_row(*(escape(str(cell)) for cell in cells))
    console.print(table if table.row_count else "no portal-shm containers")
    return 0


def cmd_logs(args: argparse.Namespace) -> int:
    from ..runtimes.containers import list_containers

    for info in list_containers():
        if args.name in (info.name, info.short_id):
            console.print(info.container.logs(tail=args.tail).decode("utf-8", "replace"), highlight=False, markup=False)
            return 0
    raise ValueError(f"no portal-shm container named {args.name!r} (see portal-shm ps)")


def cmd_stop(args: argparse.Namespace) -> int:
    from ..runtimes.containers import stop_containers

    stopped = stop_containers(image=args.image, name=args.name, everything=args.all)
    console.print(
        f"stopped {len(stopped)} container(s)" + (f": {', '.join(stopped)}" if stopped else ""),
        highlight=False,
        markup=False,
    )
    return 0


def cmd_start(args: argparse.Namespace) -> int:
    """Long-running env servers; agents attach with backend="attach", address=... ."""
    from ..runtimes.containers import start_listeners
    from ..runtimes.image_build import IMAGE_PREFIX, builtin_images

    image = IMAGE_PREFIX + args.target if args.target in builtin_images() else args.target
    with console.status(escape(f"starting {args.count} listener(s) of {image}")):
        addresses = start_listeners(image, args.count)
    table = Table(title=escape(f"{len(addresses)} listener(s) of {image}"))
    table.add_column("address")
    for address in addresses:
        table.add_row(escape(address))
    console.print(table)
    quoted = ", ".join(repr(a) for a in addresses)
    attach = f'attach: portal_shm.make_vec(ENV_ID, N, backend="attach", address=({quoted},))'
    console.print(attach, highlight=False, markup=False)
    return 0


def cmd_test(args: argparse.Namespace) -> int:
    """Smoke test: start the image's envs, show the spaces, step random actions, report steps/s."""
    import numpy as np

    import portal_shm

    from ..runtimes.containers import default_env
    from ..runtimes.image_build import IMAGE_PREFIX, builtin_images

    image = args.target
    if image in builtin_images() and "/" not in image:
        image = IMAGE_PREFIX + image
    label_env, label_kwargs = default_env(image)
    env_id = args.env or label_env
    if env_id is None:
        raise UsageError(f"image {image!r} names no default env (label portal-shm.default-env): pass --env ID")
    kwargs = {**(label_kwargs if not args.env else {}), **parse_kwargs(args.kwarg)}
    with console.status(escape(f"starting {args.num_envs} x {env_id} in {image}")):
        started = time.perf_counter()
        envs = portal_shm.make_vec(env_id, args.num_envs, backend="docker", image=image, env_kwargs=kwargs)
    try:
        table = Table(title=escape(f"portal-shm test {image}"), show_header=False)
        table.add_row("env", escape(f"{env_id} {kwargs or ''}"))
        table.add_row("start-up", f"{time.perf_counter() - started:.2f} s, {len(envs.servers)} container(s)")
        table.add_row("observation space", escape(str(envs.single_observation_space)))
        table.add_row("action space", escape(str(envs.single_action_space)))
        envs.action_space.seed(0)
        envs.reset(seed=0)
        begin = time.perf_counter()
        rewards = 0.0
        for _ in range(args.steps):
            _, reward, _, _, _ = envs.step(envs.action_space.sample())
            rewards += float(np.sum(reward))
        elapsed = time.perf_counter() - begin
        table.add_row("steps", f"{args.steps} x {args.num_envs} envs, reward sum {rewards:g}")
        table.add_row("env-steps/s", f"{args.steps * args.num_envs / elapsed:,.0f}")
    finally:
        envs.close()
    console.print(table)
    console.print("[green]ok[/]")
    return 0


def cmd_build_run_test(args: argparse.Namespace) -> int:
    code = cmd_build(args)
    if code:
        return code
    args.target = args.built_tag
    return cmd_test(args)


def _add_test_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--env", help="env id or module:callable (default: the image's portal-shm.default-env label)")
    add_kwarg_argument(parser, "env kwarg, typed: int, float, bool, None or str; repeatable (old name: --init-arg)")
    parser.add_argument("--steps", type=positive_int, default=200, help="random-action steps of every env")
    parser.add_argument("-n", "--num-envs", type=positive_int, default=2, help="number of envs stepped together")


def _add_build_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-t", "--tag", help="image tag (default: portal-shm/NAME, or the directory's name)")
    parser.add_argument(
        "--base",
        help="base image (default: $PORTAL_SHM_BASE_IMAGE, else portal-shm/base:bookworm "
        "when built, else the Dockerfile's python:3.12-slim from a registry)",
    )
    parser.add_argument("--suite", default="bookworm", help="Debian suite of `build base`; bullseye has Python 3.9")


def add_docker_commands(commands: argparse._SubParsersAction) -> None:
    build = commands.add_parser(
        "build",
        help="build an env image: a built-in NAME, a DIR, or 'base'",
        description="Build an env image from a built-in NAME (images/NAME) or a DIR with a Dockerfile, or "
        "'base': a minimal Debian with Python made by debootstrap, without a registry (needs root).",
        epilog="examples: portal-shm build --list; portal-shm build base; portal-shm build ale; "
        "portal-shm build ./my-env -t my/env",
    )
    build.add_argument("target", nargs="?", metavar="NAME|DIR|base", help="what to build")
    build.add_argument("--list", action="store_true", help="list the built-in images (NAME), one a line, and exit")
    _add_build_arguments(build)
    build.set_defaults(func=cmd_build)

    start = commands.add_parser(
        "start",
        help="start long-running env servers that agents attach to by address",
        description="Start --count listener containers of an image: long-running env servers, each at an address "
        'that agents attach to with make_vec(ENV, N, backend="attach", address=...). They run until portal-shm stop.',
        epilog="example: portal-shm start ale --count 2",
    )
    start.add_argument("target", metavar="NAME|IMAGE", help="a built-in image NAME (portal-shm/NAME) or an image")
    start.add_argument("--count", type=positive_int, default=1, help="number of listener containers")
    start.set_defaults(func=cmd_start)

    ps = commands.add_parser(
        "ps",
        help="list env-server and listener containers",
        description="List portal-shm's containers: env servers with the agent that owns them (gone: a leftover "
        "that portal-shm gc removes) and listeners with their address.",
    )
    ps.set_defaults(func=cmd_ps)

    logs = commands.add_parser(
        "logs",
        help="show a container's output",
        description="Print the last lines of a portal-shm container's output (an env server's or a listener's).",
    )
    logs.add_argument("name", help="container name or id (see portal-shm ps)")
    logs.add_argument("--tail", type=positive_int, default=100, help="number of last lines shown")
    logs.set_defaults(func=cmd_logs)

    stop = commands.add_parser(
        "stop",
        help="stop and remove env-server containers",
        description="Stop and remove portal-shm containers: those of an image, one by name, or all of them.",
    )
    which = stop.add_mutually_exclusive_group(required=True)
    which.add_argument("--image", help="those of this image")
    which.add_argument("--name", help="the one of this name (see portal-shm ps)")
    which.add_argument("--all", action="store_true", help="every portal-shm container")
    stop.set_defaults(func=cmd_stop)

    test = commands.add_parser(
        "test",
        help="smoke-test an image with random actions",
        description="Start N envs of an image on the docker backend (its default env, or --env), show their "
        "spaces, step them with random actions and print the env-steps/s.",
        epilog="example: portal-shm test ale --env ALE/Breakout-v5 --kwarg frameskip=4 --steps 500",
    )
    test.add_argument("target", metavar="NAME|IMAGE", help="a built-in image NAME (portal-shm/NAME) or an image")
    _add_test_arguments(test)
    test.set_defaults(func=cmd_test)

    brt = commands.add_parser(
        "build-run-test",
        help="build an image, then smoke-test it",
        description="Build an env image (as portal-shm build), then smoke-test what was built (as portal-shm test).",
        epilog="example: portal-shm build-run-test ./my-env -t my/env --steps 100",
    )
    brt.add_argument("target", metavar="NAME|DIR", help="a built-in image NAME or a DIR with a Dockerfile")
    _add_build_arguments(brt)
    _add_test_arguments(brt)
    brt.set_defaults(func=cmd_build_run_test)
