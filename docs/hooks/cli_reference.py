"""mkdocs hook: the CLI reference page from the ``portal-shm`` argparse parsers themselves.

``docs/reference/cli.md`` holds prose and a ``<!-- cli-reference -->`` marker; at build time the
marker becomes one section per command (nested commands included) with its usage, description and
options, read from the parser objects, so the page cannot drift from the CLI.
"""

# ruff: noqa: SLF001  (argparse offers no public way to walk a parser's actions)
from __future__ import annotations

import argparse
import re
from typing import Any, Iterator

MARKER = "<!-- cli-reference -->"


def commands(parser: argparse.ArgumentParser, path: tuple = ()) -> Iterator[tuple]:
    """``(path, parser, help)`` for every command under ``parser``, depth first, in the order defined."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help for choice in action._choices_actions}
            for name, sub in action.choices.items():
                yield (*path, name), sub, helps.get(name)
                yield from commands(sub, (*path, name))


def _cell(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _option_rows(parser: argparse.ArgumentParser) -> list:
    rows = []
    for action in parser._actions:
        if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
            continue
        if action.help == argparse.SUPPRESS:
            continue
        if action.option_strings:
            name = ", ".join(action.option_strings)
            if action.nargs != 0:
                name += " " + (action.metavar or action.dest.upper())
        else:
            name = action.metavar or action.dest
        default = ""
        unset = (
            action.default is None
            or action.default is False
            or action.default == []
            or action.default == argparse.SUPPRESS
        )
        if not unset and action.nargs != 0:
            default = f"`{action.default}`"
        choices = f" (one of: {', '.join(map(str, action.choices))})" if action.choices else ""
        rows.append(
            f"| `{_cell(name)}` | {_cell((action.help or '') % vars(action) if action.help else '')}{_cell(choices)} | {default} |"
        )
    return rows


def render(parser: argparse.ArgumentParser) -> str:
    """Markdown for every command of ``parser``."""
    parts = []
    for path, sub, help in commands(parser):
        usage = re.sub(r"\s+", " ", sub.format_usage().replace("usage: ", "")).strip()
        parts.append(f"## `portal-shm {' '.join(path)}`\n")
        if sub.description or help:
            parts.append((sub.description or help).strip() + "\n")
        parts.append(f"```text\n{usage}\n```\n")
        rows = _option_rows(sub)
        if rows:
            parts.append("| argument | meaning | default |\n|---|---|---|\n" + "\n".join(rows) + "\n")
        if sub.epilog:
            parts.append(f"```text\n{sub.epilog.strip()}\n```\n")
    return "\n".join(parts)


def on_page_markdown(markdown: str, page: Any, **_: Any) -> str:
    if MARKER not in markdown:
        return markdown
    from portal_shm.cli.app import build_parser

    return markdown.replace(MARKER, render(build_parser()))
