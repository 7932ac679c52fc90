"""An agent that itself runs in a Docker container: which container it is, and its paths as the
Docker host sees them.

The docker backend bind-mounts the run directory into env containers, and the daemon resolves a
bind's source on *its* host, not in the agent's container. So the run directory must live on a
mount of the agent's container (a host directory or a named volume): its host-side path is that
mount's ``Source`` plus the rest of the path, and env containers mount it at the agent's own path,
so every path in a server's config (sockets, lock file) means the same in both. A run directory
on the container's own filesystem (its overlay root or a tmpfs) cannot be shared: that is an error
that says so, instead of env servers that never connect.

The container is found by ``$PORTAL_SHM_AGENT_CONTAINER``, else by the container id in
``/proc/self/mountinfo`` (Docker bind-mounts ``/etc/hostname`` from ``.../containers/ID/``), else
by ``$HOSTNAME`` where ``/.dockerenv`` says this is a Docker container.
"""

from __future__ import annotations

import os
import re
from typing import Any, Optional

from ..errors import PortalError

CONTAINER_ENV_VAR = "PORTAL_SHM_AGENT_CONTAINER"
LABEL_AGENT_CONTAINER = "portal-shm.agent-container"  # on env containers: the id of their agent's container
MARKER = "owner-container"  # in a run directory: the id of the container whose agent made it (for gc)
SHAREABLE = ("bind", "volume")
_CONTAINER_ID = re.compile(r"/containers/([0-9a-f]{64})/")


class RunDirNotSharedError(PortalError):
    """The agent runs in a container and its run directory is on no mount the Docker host can see."""


def own_container_id() -> Optional[str]:
    """The id (or name) of the Docker container this process runs in; None on a host."""
    if os.environ.get(CONTAINER_ENV_VAR):
        return os.environ[CONTAINER_ENV_VAR]
    try:
        with open("/proc/self/mountinfo") as file:
            match = _CONTAINER_ID.search(file.read())
    except OSError:
        match = None
    if match:
        return match.group(1)
    if os.path.exists("/.dockerenv"):
        return os.environ.get("HOSTNAME") or None
    return None


_MOUNTS: dict = {}


def _mounts(client: Any, container: str) -> tuple:
    """The container's mounts (``docker inspect``, once: they cannot change while it runs)."""
    if container in _MOUNTS:
        return _MOUNTS[container]
    try:
        _MOUNTS[container] = tuple(client.api.inspect_container(container).get("Mounts") or ())
        return _MOUNTS[container]
    except Exception as exc:
        raise PortalError(
            f"this agent seems to run in Docker container {container!r} but the daemon does not know it "
            f"({type(exc).__name__}: {exc}); set {CONTAINER_ENV_VAR}=ID (docker ps shows it) when the Docker "
            "socket belongs to another host or the container's id is not its hostname"
        ) from None


def host_path(path: str, client: Any) -> str:
    """``path`` as the Docker host sees it: itself on a host; in a container, through its mounts.

    Raises ``RunDirNotSharedError`` naming the fix when ``path`` is on no bind mount or volume of
    the agent's own container.
    """
    container = own_container_id()
    if container is None:
        return path
    path = os.path.realpath(path)
    best = None
    for mount in _mounts(client, container):
        target = mount.get("Destination", "")
        if (path == target or path.startswith(target.rstrip("/") + "/")) and (
            best is None or len(target) > len(best["Destination"])
        ):
            best = mount
    if best is None or best.get("Type") not in SHAREABLE:
        where = f"a {best.get('Type')} mount" if best else "no bind mount or volume (its own filesystem or a tmpfs)"
        raise RunDirNotSharedError(
            f"this agent runs in Docker container {container[:12]} and {path} is on {where}, which env "
            "containers cannot see: mount a host directory (or named volume) into the agent's container and point "
            "PORTAL_SHM_RUN_DIR at it, e.g. docker run -v /tmp/portal-shm-agents/a:/tmp/portal-shm-agents/a "
            "-e PORTAL_SHM_RUN_DIR=/tmp/portal-shm-agents/a ... (portal-shm agent IMAGE -- CMD does this)"
        )
    rest = os.path.relpath(path, best["Destination"])
    return best["Source"] if rest == "." else os.path.join(best["Source"], rest)


def socket_problem(path: str = "/var/run/docker.sock") -> Optional[str]:
    """Why this process cannot use the Docker socket ``path``, in words that say the fix; None when
    it can or when the socket is not the problem (a daemon that is down, a TCP ``DOCKER_HOST``)."""
    inside = own_container_id()
    if not os.path.exists(path):
        if inside is None:
            return None
        return (
            f"this agent runs in a container ({inside[:12]}) without the Docker socket {path}: mount the host's "
            f"socket (docker run -v /var/run/docker.sock:{path} ..., as portal-shm agent does)"
        )
    if os.access(path, os.R_OK | os.W_OK):
        return None
    info = os.stat(path)
    return (
        f"user {os.getuid()}:{os.getgid()} (groups {sorted(os.getgroups())}) cannot open the Docker socket {path} "
        f"(owner {info.st_uid}:{info.st_gid}, mode {info.st_mode & 0o777:o}): give the user the socket's group "
        f"(docker run --group-add {info.st_gid} ..., as portal-shm agent does; on a host: usermod -aG docker USER)"
    )
