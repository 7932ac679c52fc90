"""Finding and managing env-server containers by their portal-shm labels (for ps, logs, stop, gc)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from .docker_backend import LABEL_OWNER, LABEL_PORTAL, LABEL_ROLE, LABEL_SERVER, docker_client
from .gc import pid_alive

DEFAULT_ENV_LABEL = "portal-shm.default-env"


@dataclass
class ContainerInfo:
    name: str
    short_id: str
    image: str
    status: str
    owner_pid: int
    owner_alive: bool
    portal: str
    server: str
    container: Any


def list_containers(client: Optional[Any] = None) -> list[ContainerInfo]:
    client = client or docker_client()
    found = []
    for container in client.containers.list(all=True, filters={"label": f"{LABEL_ROLE}=env-server"}):
        labels = container.labels
        pid = int(labels.get(LABEL_OWNER, "0") or 0)
        image = container.attrs.get("Config", {}).get("Image", "?")
        found.append(ContainerInfo(container.name, container.short_id, image, container.status, pid,
                                   pid_alive(pid), labels.get(LABEL_PORTAL, ""), labels.get(LABEL_SERVER, ""),
                                   container))
    return found


def stop_containers(image: Optional[str] = None, name: Optional[str] = None, everything: bool = False) -> list[str]:
    """Stop and remove env-server containers matching exactly one selector; returns their names."""
    if sum(x is not None and x is not False for x in (image, name, everything or None)) != 1:
        raise ValueError("choose exactly one of image, name or everything")
    stopped = []
    for info in list_containers():
        if everything or info.image == image or info.name == name or info.short_id == name:
            info.container.remove(force=True)
            stopped.append(info.name)
    return stopped


def orphaned_containers() -> list[ContainerInfo]:
    """Env-server containers whose agent is gone (never those of a live agent)."""
    return [info for info in list_containers() if not info.owner_alive]


def default_env(image: str) -> Optional[str]:
    """The env id an image serves by default (its ``portal-shm.default-env`` label)."""
    try:
        return docker_client().images.get(image).labels.get(DEFAULT_ENV_LABEL)
    except Exception:
        return None
