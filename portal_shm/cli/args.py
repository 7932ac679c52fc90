"""The types of the CLI verbs' arguments, checked by argparse: a bad value is a usage error (exit 2)
that names its flag (``argument --num-envs: expected an integer of at least 1, got '0'``), never a
traceback or an error blaming a Python argument from deep inside the library.

Typed ``key=value`` arguments (``--kwarg frameskip=4``) are among them: ``key_value`` checks the
form, ``parse_kwargs`` types the values.
"""

from __future__ import annotations

import argparse
import math
from typing import Any, Callable, Optional


def bounded(
    kind: type, low: float, high: Optional[float] = None, above: bool = False, what: str = ""
) -> Callable[[str], Any]:
    """An argparse ``type=``: ``kind`` (int or float) of at least ``low`` (greater than ``low`` when
    ``above``, at most ``high`` when given). ``what`` names the value where "a number" would not
    (``"seconds"``); NaN and infinities are refused, as no flag means them."""
    noun = what or ("an integer" if kind is int else "a number")
    if high is not None:
        bound = f"between {low:g} and {high:g}"
    else:
        bound = f"greater than {low:g}" if above else f"of at least {low:g}"

    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {noun} {bound}, got {text!r}") from None
        inside = (value > low if above else value >= low) and (high is None or value <= high)
        if not (math.isfinite(value) and inside):
            raise argparse.ArgumentTypeError(f"expected {noun} {bound}, got {text!r}")
        return value

    return parse


positive_int = bounded(int, 1)
non_negative_int = bounded(int, 0)
positive_float = bounded(float, 0, above=True)
non_negative_float = bounded(float, 0)
positive_seconds = bounded(float, 0, above=True, what="seconds")


def key_value(text: str) -> tuple:
    """An argparse ``type=`` for ``--kwarg KEY=VALUE``: ``(key, value)``, the value still text."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r} (e.g. --kwarg frameskip=4)")
    return key, value


def parse_value(text: str) -> Any:
    """Typed value of a ``key=value`` argument: int, float, bool, None, else str."""
    lowered = text.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    if lowered == "none":
        return None
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def parse_kwargs(items: list) -> dict:
    """``--kwarg`` pairs (as ``key_value`` made them) as typed keyword arguments."""
    return {key: parse_value(value) for key, value in items or []}


def add_kwarg_argument(parser: argparse.ArgumentParser, help: str) -> None:
    """``--kwarg KEY=VALUE`` (repeatable) into ``args.kwarg``; ``--init-arg``, its old name on
    ``test``, still works everywhere and is left out of the help."""
    parser.add_argument("--kwarg", action="append", type=key_value, default=[], metavar="KEY=VALUE", help=help)
    parser.add_argument(
        "--init-arg", dest="kwarg", action="append", type=key_value, default=argparse.SUPPRESS, help=argparse.SUPPRESS
    )
