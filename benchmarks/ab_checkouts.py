"""Two commits of portal-shm side by side for the A/B benchmarks (``ab_commits.py``,
``hotpath_cpu.py``): each checked out as a git worktree (a side without a commit is this working
tree), and the order their rounds take turns in, A B B A ..., so that no side always goes first.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import tempfile
from typing import Iterator, Optional


@contextlib.contextmanager
def checkouts(base: Optional[str], head: Optional[str], prefix: str) -> Iterator[tuple[dict[str, str], str]]:
    """({"base": root, "head": root}, a scratch folder); the worktrees are removed on the way out."""
    repo = subprocess.run(["git", "rev-parse", "--show-toplevel"], capture_output=True, text=True, check=True)
    repo_root = repo.stdout.strip()
    commits = {"base": base, "head": head}
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        roots: dict[str, str] = {}
        try:
            for side, commit in commits.items():
                if commit is None:
                    roots[side] = repo_root
                    continue
                roots[side] = os.path.join(tmp, side)
                subprocess.run(
                    ["git", "worktree", "add", "-q", "--detach", roots[side], commit], cwd=repo_root, check=True
                )
            yield roots, tmp
        finally:
            for side, root in roots.items():
                if commits[side] is not None:
                    subprocess.run(["git", "worktree", "remove", "--force", root], cwd=repo_root, check=False)


def turns(rounds: int) -> Iterator[tuple[int, str]]:
    """(round, side) in the order the sides run: A B, then B A, ..."""
    for r in range(rounds):
        for side in ("base", "head") if r % 2 == 0 else ("head", "base"):
            yield r, side
