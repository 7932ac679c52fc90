"""The ``portal-shm`` command: a thin layer over the library, one library call per verb."""

from .app import main

__all__ = ["main"]
