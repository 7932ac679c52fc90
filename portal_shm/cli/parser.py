"""The argument parser of every ``portal-shm`` verb: exact flags, their defaults in ``--help``, and
errors that name the verb and the flag that was meant.

Plain argparse takes abbreviations (``--second`` for ``--seconds``: a typo becomes a silent
choice), and a verb's unknown flag is reported by the top-level parser with the top-level usage,
which lists verbs, not the flags that would have worked. ``Parser`` turns abbreviations off;
each verb's parser (``Subcommand``) reports its own unknown flags with its own usage and the
closest real flag (``did you mean --num-envs?``). A verb's check that argparse cannot make alone
(two flags that disagree) raises ``UsageError``, which ``main`` reports the same way. The top-level
help lists the verbs in groups (``CommandsFormatter``).
"""

from __future__ import annotations

import argparse
import difflib
import functools
import sys
from typing import Any, NoReturn, Optional, Sequence


class UsageError(ValueError):
    """Arguments of a verb that argparse could not check on its own (``--env-index`` past
    ``--num-envs``): reported with the verb's usage, exit status 2, as argparse's own errors are."""


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


class CommandsFormatter(HelpFormatter):
    """The verbs under headings (``groups``: ``(title, names)`` pairs) instead of one long list; a
    verb no group names is listed under "other", so none can drop out of the help."""

    def __init__(self, prog: str, groups: Sequence = (), **kwargs: Any) -> None:
        super().__init__(prog, **kwargs)
        self.groups = groups

    def add_argument(self, action: argparse.Action) -> None:
        super().add_argument(action)
        if action.nargs == argparse.PARSER and self.groups and action.choices:  # verbs a level below their group
            longest = max(len(name) for name in action.choices)
            self._action_max_length = max(self._action_max_length, self._current_indent + 2 + longest)

    def _format_action(self, action: argparse.Action) -> str:
        if action.nargs != argparse.PARSER or not self.groups:  # not the verbs
            return super()._format_action(action)
        verbs = {verb.dest: verb for verb in self._iter_indented_subactions(action)}
        grouped = [name for _, names in self.groups for name in names]
        parts = []
        for title, names in [*self.groups, ("other", [name for name in verbs if name not in grouped])]:
            if not names:
                continue
            parts.append(f"{' ' * self._current_indent}{title}:\n")
            self._indent()
            for name in names:
                parts.append(super()._format_action(verbs[name]))
            self._dedent()
        return "".join(parts)


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
    """argparse without abbreviations, with defaults in ``--help``; its verbs are ``Subcommand``s,
    listed in ``command_groups`` (``(title, names)`` pairs) when given."""

    def __init__(self, *args: Any, command_groups: Sequence = (), **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        grouped = functools.partial(CommandsFormatter, groups=command_groups) if command_groups else HelpFormatter
        kwargs.setdefault("formatter_class", grouped)
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
    shows ``run``'s usage and flags instead of the top-level parser's list of verbs. It puts itself
    into the arguments as ``verb_parser`` (the innermost verb's wins), for ``UsageError``s."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.set_defaults(verb_parser=self)

    def parse_known_args(self, args: Optional[Sequence[str]] = None, namespace: Any = None) -> Any:  # type: ignore[override]
        namespace, extras = super().parse_known_args(args, namespace)
        if extras:
            self.error(unrecognized_message(extras, self.flags()))
        return namespace, extras
