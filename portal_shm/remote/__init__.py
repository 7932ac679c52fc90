"""Envs on other machines: the host daemon (``portal-shm host``) that runs an ordinary local portal
next to the envs, and the agent's ``RemoteVectorPortal`` that steps them over one port per host.

A host is an agent of its own local portal (the zero-copy ring stays on the env machine) and an
env side to the far agent; this folder sits on both and is imported by neither. One message crosses
the network per host per (sub)batch: a msgpack header and raw array frames (``frames.py``),
encrypted and mutually authenticated with CURVE by default (``keys.py``).
"""

from __future__ import annotations
