"""The rich Console of every ``portal-shm`` verb: wrapped to the terminal, never to a file or pipe.

Off a terminal rich assumes 80 columns and wraps there, which splits what scripts grep for
(``(210,\\n160, 3)``) and cuts tables into narrow columns. Piped or redirected output keeps each
line whole instead: no soft wrapping and a width no table reaches (``$COLUMNS`` still wins).

Text that is not the CLI's own (an error's message, a path, an env id, a container's name) is never
read as rich markup, which would eat every ``[...]`` in it (``pip install 'portal-shm[docker]'``,
``[runtime: process ...]``): it goes through ``rich.markup.escape`` or ``Text``, as ``error_text``
does for errors.
"""

from __future__ import annotations

import os

from rich.console import Console
from rich.text import Text

PIPE_WIDTH = 1000  # off a terminal: wide enough for any row we print, so nothing wraps


def make_console(stderr: bool = False) -> Console:
    """A Console on stdout (or stderr) that wraps only when it writes to a terminal."""
    console = Console(stderr=stderr)
    if console.is_terminal or os.environ.get("COLUMNS"):
        return console
    return Console(stderr=stderr, soft_wrap=True, width=PIPE_WIDTH)


def error_text(message: str, label: str = "error") -> Text:
    """``error: MESSAGE``, the label in bold red and the message exactly as given (never markup)."""
    return Text.assemble((f"{label}:", "bold red"), " ", message)
