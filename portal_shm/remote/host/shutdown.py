"""How an env host's sessions end when the host stops: asked to close their envs, waited for,
aborted where closing hangs (an env's ``close()``, a runtime that does not stop), and counted."""

from __future__ import annotations

import logging
import time
from typing import Any

from .session import HostSession

log = logging.getLogger("portal_shm.host")

CLOSE_SECONDS = 10.0  # for sessions to close their envs when the host stops, then they are aborted
ABORT_SECONDS = 5.0


def stop_sessions(sessions: list[HostSession]) -> tuple[dict[str, Any], list[HostSession]]:
    """Stop ``sessions`` (their envs and env servers first); what was freed (sessions, envs,
    servers), and the sessions that did not end even when aborted (their pipes left open)."""
    freed = {
        "sessions": len(sessions),
        "envs": sum(s.num_envs for s in sessions if s.started),
        "servers": sum(server_count(s) for s in sessions),
    }
    for session in sessions:
        session.stop()
    stuck = wait_finished(sessions, CLOSE_SECONDS)
    if stuck:
        for session in stuck:
            session.abort()
        stuck = wait_finished(stuck, ABORT_SECONDS)
    for session in stuck:
        log.error("session %s did not end within %.0f s of the host's stop: leaving it", session.client,
                  CLOSE_SECONDS + ABORT_SECONDS)  # fmt: skip
    return freed, stuck


def wait_finished(sessions: list[HostSession], seconds: float) -> list[HostSession]:
    """Wait up to ``seconds`` in all for ``sessions`` to end (closing the pipes of those that did);
    those that did not."""
    deadline = time.monotonic() + seconds
    stuck = []
    for session in sessions:
        if session.finished.wait(max(0.0, deadline - time.monotonic())):
            session.close_pipes()
        else:
            stuck.append(session)
    return stuck


def server_count(session: HostSession) -> int:
    portal = session.portal
    try:
        return len(portal.servers) if portal is not None else 0
    except Exception:  # a portal that failed half-way through its start
        return 0
