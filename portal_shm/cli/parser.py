"""The argument parser of every ``portal-shm`` verb: exact flags, their defaults in ``--help``, and
errors that name the verb and the flag that was meant.

Plain argparse takes abbreviations (``--second`` for ``--seconds``: a typo becomes a silent
choice), and a verb's unknown flag is reported by the top-level parser with the top-level usage,
which lists verbs, not the flags that would have worked. ``Parser`` turns abbreviations off;
each verb's parser (``Subcommand``) reports its own unknown flags with its own usage and the
closest real flag (``did you mean --num-envs?``).
"""

from __future__ import annotations

import argparse
import difflib
import sys
from typing import Any, NoReturn, Optional, Sequence


class HelpFormatter(argparse.HelpFormatter):
    """Appends ``(default: X)`` to a flag's help unless the help already says its default.

    ``None``, ``False`` and empty defaults are left out: they mean "not given", which the help
    text itself explains (``(default: one server per CPU core)``).
    """

    def _get_help_string(self, action: argparse.Action) -> Optional[str]:
        text = action.help or ""
        default = action.default
        if "default" in text or default is argparse.SUPPRESS or default is None or default is False:
            return text
        if default == [] or default == ():
            return text
        if action.option_strings or action.nargs in (argparse.OPTIONAL, argparse.ZERO_OR_MORE):
            return f"{text} (default: %(default)s)" if text else "(default: %(default)s)"
        return text


def unrecognized_message(arguments: Sequence[str], flags: Sequence[str]) -> str:
    """``unrecognized arguments: ...``, with the closest of ``flags`` for each unknown flag."""
    hints = []
    for argument in arguments:
        if not argument.startswith("-"):
            continue
        name = argument.split("=", 1)[0]
        close = difflib.get_close_matches(name.replace("_", "-"), flags, n=1, cutoff=0.6)
        if close:
            hints.append(f"{name}: did you mean {close[0]}?")
    return "unrecognized arguments: " + " ".join(arguments) + "".join(f"\n  {hint}" for hint in hints)


class Parser(argparse.ArgumentParser):
    """argparse without abbreviations, with defaults in ``--help``; its verbs are ``Subcommand``s."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)

    def add_subparsers(self, **kwargs: Any) -> argparse._SubParsersAction:
        kwargs.setdefault("parser_class", Subcommand)
        return super().add_subparsers(**kwargs)

    def flags(self) -> list:
        """Every option string this parser takes (``--num-envs``, ``-n``, ...)."""
        return [flag for action in self._actions for flag in action.option_strings]

    def parse_args(self, args: Optional[Sequence[str]] = None, namespace: Any = None) -> Any:  # type: ignore[override]
        namespace, extras = self.parse_known_args(args, namespace)
        if extras:
            self.error(unrecognized_message(extras, self.flags()))
        return namespace

    def error(self, message: str) -> NoReturn:
        """Usage of this very parser (a verb's own), the message, and where to read more."""
        self.print_usage(sys.stderr)
        self.exit(2, f"{self.prog}: error: {message}\n(see {self.prog} --help)\n")


class Subcommand(Parser):
    """A verb's parser (``portal-shm run``): it rejects what it does not know itself, so the error
    shows ``run``'s usage and flags instead of the top-level parser's list of verbs."""

    def parse_known_args(self, args: Optional[Sequence[str]] = None, namespace: Any = None) -> Any:  # type: ignore[override]
        namespace, extras = super().parse_known_args(args, namespace)
        if extras:
            self.error(unrecognized_message(extras, self.flags()))
        return namespace, extras
