"""The package version: what CLI, runtime caches and images record (kept apart from the lazy root)."""

__version__ = "0.1.0"
