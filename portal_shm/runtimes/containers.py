"""Finding and managing env-server containers by their portal-shm labels (for ps, logs, stop, gc)."""

from __future__ import annotations

import json
import os
import secrets
import tempfile
from dataclasses import dataclass
from typing import Any, Optional

from ..errors import PortalError
from .agent_container import LABEL_AGENT_CONTAINER, own_container_id
from .docker import LABEL_OWNER, LABEL_PORTAL, LABEL_PREFIX, LABEL_ROLE, LABEL_SERVER, docker_client
from .resources import pid_alive

DEFAULT_ENV_LABEL = "portal-shm.default-env"
DEFAULT_KWARGS_LABEL = "portal-shm.default-kwargs"
LABEL_ADDRESS = f"{LABEL_PREFIX}.address"


SERVERS_DIR_ENV_VAR = "PORTAL_SHM_SERVERS_DIR"


@dataclass
class ContainerInfo:
    role: str
    name: str
    short_id: str
    image: str
    status: str
    owner_pid: int
    owner_alive: bool
    portal: str
    server: str
    address: str
    container: Any


def container_running(client: Any, name: str) -> bool:
    """Whether container ``name`` (an id or name) exists and runs."""
    import docker.errors

    try:
        return client.containers.get(name).status in ("running", "restarting", "created")
    except docker.errors.NotFound:
        return False


def owner_alive(client: Any, labels: dict) -> bool:
    """Whether the agent that owns a container lives: its pid, and where the agent ran in a container
    (``portal-shm.agent-container``), that container; its pid only counts from inside that container.

    Seen from inside a container, a host agent's pid is another pid namespace's: such an agent
    counts as alive (the host's gc judges it), or gc in an agent's container would remove the env
    containers of every agent on the host."""
    pid = int(labels.get(LABEL_OWNER, "0") or 0)
    container = labels.get(LABEL_AGENT_CONTAINER)
    here = own_container_id()
    if container == here:
        return pid_alive(pid)
    if container is None:
        return True
    return container_running(client, container)


def list_containers(client: Optional[Any] = None) -> list[ContainerInfo]:
    client = client or docker_client()
    found = []
    for container in client.containers.list(all=True, filters={"label": LABEL_ROLE}):
        labels = container.labels
        pid = int(labels.get(LABEL_OWNER, "0") or 0)
        image = container.attrs.get("Config", {}).get("Image", "?")
        found.append(
            ContainerInfo(
                labels.get(LABEL_ROLE, ""),
                container.name,
                container.short_id,
                image,
                container.status,
                pid,
                owner_alive(client, labels),
                labels.get(LABEL_PORTAL, ""),
                labels.get(LABEL_SERVER, ""),
                labels.get(LABEL_ADDRESS, ""),
                container,
            )
        )
    return found


def stop_containers(image: Optional[str] = None, name: Optional[str] = None, everything: bool = False) -> list[str]:
    """Stop and remove env-server containers matching exactly one selector; returns their names."""
    if sum(x is not None and x is not False for x in (image, name, everything or None)) != 1:
        raise ValueError("choose exactly one of image, name or everything")
    stopped = []
    for info in list_containers():
        if everything or info.image == image or info.name == name or info.short_id == name:
            info.container.remove(force=True)
            if info.address.startswith("ipc://"):
                try:
                    os.unlink(info.address[len("ipc://") :])
                except OSError:
                    pass
            stopped.append(info.name)
    if stopped:
        try:
            os.rmdir(servers_dir())  # (once its last listener and portal are gone: nothing left in /tmp)
        except OSError:
            pass
    return stopped


def orphaned_containers() -> list[ContainerInfo]:
    """Env-server containers whose agent is gone (never those of a live agent)."""
    return [info for info in list_containers() if info.role == "env-server" and not info.owner_alive]


def default_env(image: str) -> tuple[Optional[str], dict]:
    """The env id and kwargs an image serves by default (``portal-shm.default-env``/``-kwargs`` labels)."""
    try:
        labels = docker_client().images.get(image).labels or {}
    except Exception:
        return None, {}
    return labels.get(DEFAULT_ENV_LABEL), json.loads(labels.get(DEFAULT_KWARGS_LABEL) or "{}")


def servers_dir() -> str:
    """The host directory holding listener sockets and attached portals' run directories."""
    return os.environ.get(SERVERS_DIR_ENV_VAR) or os.path.join(tempfile.gettempdir(), "portal-shm-servers")


def start_listeners(image: str, count: int) -> list[str]:
    """Start ``count`` long-running listener containers of ``image``; returns their addresses."""
    client = docker_client()
    import docker.errors

    try:
        command = list(client.images.get(image).attrs["Config"].get("Cmd") or [])
    except docker.errors.ImageNotFound:
        raise PortalError(f"docker image {image!r} not found locally: build it first (portal-shm build)") from None
    directory = servers_dir()
    os.makedirs(directory, mode=0o700, exist_ok=True)
    base = image.split("/")[-1].split(":")[0]
    addresses = []
    for _ in range(count):
        name = f"psm-{base}-{secrets.token_hex(3)}"
        address = f"ipc://{directory}/{name}.sock"
        client.containers.run(
            image,
            command=command + ["--listen", address],
            name=name,
            detach=True,
            init=True,
            network_mode="none",
            ipc_mode="host",
            volumes={directory: {"bind": directory, "mode": "rw"}},
            labels={LABEL_ROLE: "listener", LABEL_ADDRESS: address},
            restart_policy={"Name": "unless-stopped"},
        )
        addresses.append(address)
    return addresses
