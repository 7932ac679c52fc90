"""mkdocs hook: the CLI reference page from the ``portal-shm`` argparse parsers themselves.

``docs/reference/cli.md`` holds prose and two markers; at build time ``<!-- cli-commands -->``
becomes the table of every command in the groups of ``portal-shm --help`` (``COMMAND_GROUPS``),
and ``<!-- cli-reference -->`` one section per command (nested commands included) with its usage,
description and options, read from the parser objects, so the page cannot drift from the CLI.
"""

# ruff: noqa: SLF001  (argparse offers no public way to walk a parser's actions)
from __future__ import annotations

import argparse
import re
from typing import Any, Iterator

MARKER = "<!-- cli-reference -->"
COMMANDS_MARKER = "<!-- cli-commands -->"


def commands(parser: argparse.ArgumentParser, path: tuple = ()) -> Iterator[tuple]:
    """``(path, parser, help)`` for every command under ``parser``, depth first, in the order defined."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help for choice in action._choices_actions}
            for name, sub in action.choices.items():
                yield (*path, name), sub, helps.get(name)
                yield from commands(sub, (*path, name))


def _cell(text: Any) -> str:
    """Text of a table cell: its pipes escaped (the table's own), on one line."""
    return str(text).replace("|", "\\|").replace("\n", " ")


def _code_cell(text: Any) -> str:
    """A table cell's code span: pipes stay as they are (a table does not split inside a code span,
    and would print the backslash of ``\\|`` there)."""
    return "`" + str(text).replace("\n", " ") + "`"


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
            default = _code_cell(action.default)
        choices = f" (one of: {', '.join(map(str, action.choices))})" if action.choices else ""
        rows.append(
            f"| {_code_cell(name)} | {_cell((action.help or '') % vars(action) if action.help else '')}"
            f"{_cell(choices)} | {default} |"
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


def _anchor(path: tuple) -> str:
    """The id the toc extension gives the heading ``## `portal-shm PATH` ``."""
    return "portal-shm-" + "-".join(path)


def render_commands(parser: argparse.ArgumentParser, groups: tuple) -> str:
    """Markdown: per group of ``portal-shm --help`` a table of its commands (and their verbs), each
    linked to its section, with the one-line help ``--help`` shows."""
    found = {path: help for path, _, help in commands(parser)}
    listed = {path for path in found if path[0] in {name for _, names in groups for name in names}}
    missing = sorted(" ".join(path) for path in set(found) - listed)
    if missing:
        raise ValueError(f"commands in no group of COMMAND_GROUPS: {missing}")
    parts = []
    for title, names in groups:
        rows = [
            f"| [`portal-shm {' '.join(path)}`](#{_anchor(path)}) | {_cell(help or '')} |"
            for name in names
            for path, help in found.items()
            if path[0] == name
        ]
        parts.append(f"**{title.capitalize()}**\n\n| command | what it does |\n|---|---|\n" + "\n".join(rows) + "\n")
    return "\n".join(parts)


def on_page_markdown(markdown: str, page: Any, **_: Any) -> str:
    if MARKER not in markdown and COMMANDS_MARKER not in markdown:
        return markdown
    from portal_shm.cli.app import COMMAND_GROUPS, build_parser

    parser = build_parser()
    markdown = markdown.replace(COMMANDS_MARKER, render_commands(parser, COMMAND_GROUPS))
    return markdown.replace(MARKER, render(parser))
