"""mkdocs hook: files of the repository's root included into a page keep working links.

``docs/security.md`` includes ``SECURITY.md`` (``--8<-- "SECURITY.md:7:"``), written for GitHub, where a
link into the site reads ``docs/concepts/infos.md``. Included as it is, that link points nowhere in the
site. This hook includes such root files itself, before pymdownx.snippets would, with every
``](docs/...)`` link made relative to the including page. Line ranges are snippets' own
(``FILE:start:end``, 1-based, both ends included, either may be left out).
"""

from __future__ import annotations

import os
import posixpath
import re
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
INCLUDE = re.compile(r'^--8<-- "([^"/:]+)(?::(\d*))?(?::(\d*))?"\s*$', re.M)
DOCS_LINK = re.compile(r"\]\(docs/([^)\s]*)\)")


def _included(match: re.Match, page_dir: str) -> str:
    name, start, end = match.group(1), match.group(2), match.group(3)
    path = os.path.join(ROOT, name)
    if not os.path.isfile(path):
        return match.group(0)  # not a root file: snippets reports it
    with open(path, encoding="utf-8") as file:
        lines = file.read().splitlines()
    lines = lines[int(start) - 1 if start else 0 : int(end) if end else None]
    text = "\n".join(lines)
    return DOCS_LINK.sub(lambda m: "](" + posixpath.relpath(m.group(1), page_dir or ".") + ")", text)


def on_page_markdown(markdown: str, page: Any, **_: Any) -> str:
    page_dir = posixpath.dirname(page.file.src_uri)
    return INCLUDE.sub(lambda m: _included(m, page_dir), markdown)
