"""``portal-shm env create|ls|rm``: the cached runtimes of the venv and micromamba backends.

One library call per verb (``ensure_venv``, ``list_runtimes``, ``remove_runtimes``); building a
venv ahead of time spares the first portal the wait, and ``ls``/``rm`` keep the cache in check.
"""

from __future__ import annotations

import argparse
import os
import time

from rich.markup import escape
from rich.table import Table

from .console import make_console

console = make_console()


def human_size(size: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if size < 1024 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} GB"


def cmd_env_create(args: argparse.Namespace) -> int:
    """Build (or find) the venv that ``make_vec(..., backend="venv", requirements=...)`` would use."""
    from ..runtimes.venv import VenvBackend, ensure_venv, venv_hash, venv_python

    backend = VenvBackend(
        requirements=tuple(args.requirements),
        requirements_file=args.requirements_file,
        python=args.python,
        cache_dir=args.cache_dir,
    )
    digest = venv_hash(backend)
    path = ensure_venv(backend)
    console.print(f"venv [bold]{escape(digest)}[/] ready: {escape(str(path))}", highlight=False)
    console.print(f"its python: {venv_python(path)}", highlight=False, markup=False)
    return 0


def _what(info: dict) -> str:
    if info.get("spec"):
        text = f"-f {os.path.basename(info['spec'])}"
        return text + (f" + {os.path.basename(info['setup_script'])}" if info.get("setup_script") else "")
    parts = list(info.get("requirements") or [])
    if info.get("requirements_file"):
        parts.append(f"-r {info['requirements_file']}")
    return " ".join(parts) or "-"


def cmd_env_ls(args: argparse.Namespace) -> int:
    """Table of cached runtimes: hash, kind, what they were built from, python, size, age."""
    from ..runtimes.cache import cache_root, list_runtimes

    runtimes = list_runtimes(cache_dir=args.cache_dir)
    if not runtimes:
        console.print(f"no cached runtimes in {cache_root(args.cache_dir)}", highlight=False, markup=False)
        return 0
    table = Table(title=escape(f"cached runtimes in {cache_root(args.cache_dir)}"))
    for column in ("hash", "kind", "built from", "python", "size", "created"):
        table.add_column(column, justify="right" if column == "size" else "left", no_wrap=column != "built from")
    for info in runtimes:
        created = time.strftime("%Y-%m-%d %H:%M", time.localtime(info["created"]))
        python = (info.get("python_version") or "").split(" ")[0] or "-"
        cells = (
            info["hash"],
            info["kind"] + ("" if info["complete"] else " (unfinished)"),
            _what(info),  # requirements such as gymnasium[atari]: text, never markup
            python,
            human_size(info["size"]),
            created,
        )
        table.add_row(*(escape(str(cell)) for cell in cells))
    console.print(table)
    return 0


def cmd_env_rm(args: argparse.Namespace) -> int:
    """Remove one cached runtime (by hash or a unique prefix of it) or all of them."""
    from ..runtimes.cache import ALL, remove_runtimes

    removed = remove_runtimes(ALL if args.all else args.hash, cache_dir=args.cache_dir)
    if not removed:
        console.print("nothing to remove")
    for info in removed:
        console.print(
            f"removed {info['kind']} {info['hash']} ({human_size(info['size'])}): {info['path']}",
            highlight=False,
            markup=False,
        )
    return 0


def add_env_commands(subparsers: argparse._SubParsersAction) -> None:
    """Add ``env`` with its verbs ``create``, ``ls`` and ``rm`` to the ``portal-shm`` parser."""
    env = subparsers.add_parser(
        "env",
        help="cached runtimes of the venv and micromamba backends",
        description="Build, list and remove the cached runtimes of the venv and micromamba backends.",
    )
    verbs = env.add_subparsers(dest="env_command", required=True)

    create = verbs.add_parser(
        "create",
        help="build the venv for these requirements now (a no-op when cached)",
        description='Build the venv that make_vec(..., backend="venv", requirements=...) would use, now, so '
        "that the first portal does not wait for it; a no-op when it is cached.",
        epilog="example: portal-shm env create 'gym==0.26.2' 'numpy<2'",
    )
    create.add_argument("requirements", nargs="*", help="requirement specifiers, e.g. 'numpy<2' gym==0.26.2")
    create.add_argument("-r", "--requirements-file", metavar="FILE", help="a pip requirements file")
    create.add_argument("--python", help="base interpreter of the venv (default: this one)")
    create.set_defaults(func=cmd_env_create)

    ls = verbs.add_parser(
        "ls",
        help="list cached venvs and micromamba envs",
        description="List the cached runtimes: hash, kind, what they were built from, python, size and age.",
    )
    ls.set_defaults(func=cmd_env_ls)

    rm = verbs.add_parser(
        "rm",
        help="remove a cached runtime, or all of them",
        description="Remove one cached runtime (by its hash, or a unique prefix of it) or, with --all, every one.",
    )
    which = rm.add_mutually_exclusive_group(required=True)
    which.add_argument("hash", nargs="?", help="its hash (as `env ls` shows), or a unique prefix of it")
    which.add_argument("--all", action="store_true", help="remove every cached runtime")
    rm.set_defaults(func=cmd_env_rm)

    for parser in (create, ls, rm):
        parser.add_argument(
            "--cache-dir", default=None, help="cache root (default: $PORTAL_SHM_CACHE or ~/.cache/portal-shm)"
        )
