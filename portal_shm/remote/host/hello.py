"""The form of an agent's hello: protocol, fields and types, checked before anything else is."""

from __future__ import annotations

from typing import Any, Optional

from .. import frames


def hello_problem(header: dict[str, Any], data: list[Any]) -> Optional[str]:
    """What is wrong with a hello's form (None: nothing), before the policy and the quotas look at it."""
    if header.get("protocol") != frames.PROTOCOL:
        return (
            f"agent speaks host protocol {header.get('protocol')!r}, this host {frames.PROTOCOL}: "
            "use one portal-shm version"
        )
    if (
        header.get("seq") != 1
        or not isinstance(header.get("env_id"), str)
        or not isinstance(header.get("runtime"), str)
        or header.get("arrays")
        or len(data) != 1
    ):
        return "malformed hello"
    count = header.get("num_envs")
    if not isinstance(count, int) or isinstance(count, bool) or count < 1:
        return f"invalid num_envs {count!r:.40}"
    offer = header.get("codecs", [])
    if not isinstance(offer, list) or len(offer) > 16 or not all(isinstance(c, str) for c in offer):
        return "malformed hello: codecs must be a list of codec names"
    if not isinstance(header.get("compression", "auto"), str):
        return "malformed hello: compression must be a codec name"
    if header.get("factory"):
        return "hosts never run code an agent ships: name an env id or an entry point that exists on the host"
    return None
