"""What the agent and the env side agree on: messages, spaces as data, the ring's layout, the
doorbells, the descriptor handoff and how a server is launched.

Imports nothing else of portal-shm, and only numpy, pyzmq and msgpack from outside: both sides
load it, the env side inside old runtimes.
"""

from __future__ import annotations
