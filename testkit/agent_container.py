"""The agent-in-a-container tests' common ground: this checkout, the example they run
(``examples/compose/step_pong.py``: seeded Pong, a digest of everything that came back), its report,
and the env containers an agent container started beside it."""

from __future__ import annotations

import json
import os
from typing import Any

from portal_shm.runtimes.agent_container import LABEL_AGENT_CONTAINER

__all__ = ["REPO", "STEP_PONG", "env_containers", "report"]

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the checkout, mounted into agent containers
STEP_PONG = "examples/compose/step_pong.py"  # relative to REPO


def report(output: str) -> dict:
    """The JSON line step_pong.py prints last."""
    return json.loads(output.strip().splitlines()[-1])


def env_containers(client: Any) -> list:
    """The env containers (running or not) that agent containers started. ``list`` inspects each
    container it found, so one removed in between (the agent's gc at work) fails it: list again."""
    import docker.errors

    for _ in range(10):
        try:
            return client.containers.list(all=True, filters={"label": LABEL_AGENT_CONTAINER})
        except docker.errors.NotFound:
            continue
    return client.containers.list(all=True, filters={"label": LABEL_AGENT_CONTAINER})
