"""Typed ``key=value`` arguments of the CLI verbs (``--kwarg frameskip=4``, ``--init-arg``)."""

from __future__ import annotations

from typing import Any


def parse_value(text: str) -> Any:
    """Typed value of a ``key=value`` argument: int, float, bool, None, a tuple "AxBxC", else str."""
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
    kwargs = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise SystemExit(f"error: expected key=value, got {item!r} (e.g. --kwarg frameskip=4)")
        kwargs[key] = parse_value(value)
    return kwargs
