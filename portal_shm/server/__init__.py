"""The env side: the only part of portal-shm that runs inside env runtimes.

It depends on nothing but the standard library, numpy, pyzmq, msgpack and ``portal_shm.wire``, and
stays Python 3.9 compatible, so that it installs into old, minimal runtimes (``pip install
--no-deps portal-shm numpy pyzmq msgpack``). ``python -m portal_shm.server`` is what runtimes start.
"""

from __future__ import annotations

from .startup import main, serve

__all__ = ["main", "serve"]
