"""The package version: what CLI, runtime caches and images record (kept apart from the lazy root)."""

from __future__ import annotations

__version__ = "0.1.0"
