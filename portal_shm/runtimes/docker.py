"""Env servers in Docker containers, started and watched through the docker SDK.

Containers get no network (``--network none``), their own IPC namespace (nothing of the host's
/dev/shm: the ring comes as a descriptor over a socket, see ``handoff``; ``ipc_host=True``
shares the host's IPC namespace for envs that need it), and the portal's run directory
bind-mounted at the same path for the control sockets, the ring's socket and the agent's lock
file (an agent in a container gives the daemon that directory's host path, see
``agent_container``). Labels name the owning agent pid (and its container, if any) and portal, so
``portal-shm ps/stop/gc`` find them; the agent removes its containers on close, and a container
whose agent died exits by itself (its server sees the lock go) and is removed by ``gc``.
"""

from __future__ import annotations

import inspect
import os
import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Optional

from ..errors import DockerUnavailableError, PortalError
from .agent_container import LABEL_AGENT_CONTAINER, host_path, own_container_id, socket_problem
from .backend import Backend, ServerHandle, ServerLaunch
from .config_file import CONFIG_ENV_VAR, remove_config, write_launch_config
from .env_wheel import env_wheel_digest

if TYPE_CHECKING:
    from .hosting import HostOffer

LABEL_PREFIX = "portal-shm"
LABEL_OWNER = f"{LABEL_PREFIX}.owner-pid"
LABEL_PORTAL = f"{LABEL_PREFIX}.portal"
LABEL_SERVER = f"{LABEL_PREFIX}.server"
LABEL_ROLE = f"{LABEL_PREFIX}.role"
LABEL_MAX_ENVS = f"{LABEL_PREFIX}.max-envs-per-server"
LABEL_ENV_IMAGE = f"{LABEL_PREFIX}.env-image"  # set by portal-shm build: what hosts serve by default
# set by portal-shm build: the env side installed inside (``env_wheel_digest`` of its portal-shm-env wheel)
LABEL_SERVER_DIGEST = f"{LABEL_PREFIX}.server-digest"
NOBODY = 65534


class DefaultImage(str):
    """The image ``DockerBackend`` uses when none is named: a ``str`` (``DockerBackend.image`` stays
    ``"portal-shm/ale"`` for whoever reads it) whose type tells "not given" from ``image="portal-shm/ale"``."""


DEFAULT_IMAGE = DefaultImage("portal-shm/ale")
_warned_default_image = False
_warned_stale_images: set = set()


def warn_default_image() -> None:
    """Say once per process which image was picked, since ALE's image quietly fails other envs' ids."""
    global _warned_default_image
    if _warned_default_image:
        return
    _warned_default_image = True
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    frame, level = inspect.currentframe().f_back, 2
    while frame.f_back is not None and (
        frame.f_code.co_filename.startswith(package) or frame.f_code.co_filename == "<string>"
    ):
        frame, level = frame.f_back, level + 1  # point at the caller's line, past portal_shm (and dataclass code)
    warnings.warn(
        f'backend="docker" without image=: the envs run in {DEFAULT_IMAGE} (the Atari image); name the image '
        'to choose, e.g. make_vec(..., backend="docker", image="portal-shm/vizdoom") or portal-shm run --image',
        UserWarning,
        stacklevel=level,
    )


def warn_if_stale(image: str, labels: dict) -> None:
    """Say once per image when ``portal-shm build`` installed another env-side wheel in it than this
    agent's (``env_wheel_digest``): within one protocol version such a server starts, and then
    misreads what changed (a new option, a nested argument) in ways no handshake can name."""
    built_from = labels.get(LABEL_SERVER_DIGEST)
    if not built_from or built_from == env_wheel_digest() or image in _warned_stale_images:
        return
    _warned_stale_images.add(image)
    warnings.warn(
        f"docker image {image!r} holds portal-shm's env server from other code than this agent's "
        f"(built from another checkout or version): if its envs misbehave, rebuild it with this one "
        f"(portal-shm build NAME|DIR -t {image})",
        UserWarning,
        stacklevel=2,
    )


def docker_client() -> Any:
    """A docker SDK client, or a clear error saying how to get one."""
    try:
        import docker
    except ImportError:
        raise DockerUnavailableError(
            "the docker backend needs the docker SDK: pip install 'portal-shm[docker]' (or pip install docker)"
        ) from None
    try:
        client = docker.from_env()
        client.ping()
    except Exception as exc:
        host = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
        problem = socket_problem(host[len("unix://") :]) if host.startswith("unix://") else None
        if problem:
            raise DockerUnavailableError(f"cannot reach the Docker daemon: {problem}") from None
        raise DockerUnavailableError(
            f"cannot reach the Docker daemon ({exc}). Install Docker (Debian: apt-get install docker.io) and "
            "start it (systemctl start docker, or run dockerd in the background); check DOCKER_HOST and that "
            "this user may use /var/run/docker.sock"
        ) from None
    return client


class DockerHandle(ServerHandle):
    def __init__(self, container: Any, image: str) -> None:
        self.container = container
        self.image = image
        self._status: Optional[str] = None

    def exit_status(self) -> Optional[str]:
        if self._status is not None:
            return self._status
        try:
            self.container.reload()
        except Exception as exc:  # removed behind our back
            self._status = f"container vanished ({type(exc).__name__})"
            return self._status
        if self.container.status in ("exited", "dead"):
            state = self.container.attrs.get("State", {})
            code = state.get("ExitCode")
            reason = " (out of memory)" if state.get("OOMKilled") else ""
            self._status = f"container exited with code {code}{reason}"
            if code == 137 and not reason:
                self._status += " (killed: SIGKILL or docker kill)"
            elif code == 139:
                self._status += " (segmentation fault)"
        return self._status

    def log_tail(self, lines: int = 30) -> str:
        try:
            return self.container.logs(tail=lines).decode("utf-8", "replace")
        except Exception:
            return ""

    def stop(self, timeout: float) -> None:
        try:
            self.container.stop(timeout=max(1, int(timeout)))
        except Exception:
            pass
        try:
            self.container.remove(force=True)
        except Exception:
            pass
        # Each start makes a client of its own: its connections to the daemon go with the server, or
        # every restart and recycle of a long run would leave the agent an open socket or two.
        self.container.client.close()

    def describe(self) -> str:
        return f"docker container {self.container.short_id} of image {self.image}"

    def host_pid(self) -> Optional[int]:
        pid = self.container.attrs.get("State", {}).get("Pid")
        if not pid:
            try:
                self.container.reload()
            except Exception:
                return None
            pid = self.container.attrs.get("State", {}).get("Pid")
        return int(pid) if pid else None


@dataclass(frozen=True)
class DockerBackend(Backend):
    """Runs each env server in a container of ``image`` (its default command serves the envs).

    ``image`` is a built image (``portal-shm build ale`` gives ``portal-shm/ale``); left out, it is
    ``portal-shm/ale``, with a warning naming it (once per process). Limits per
    container: ``pids_limit`` (default 1024: ample for envs that spawn helper processes, such as
    ViZDoom, and a stop for a fork bomb), ``mem_limit`` (e.g. ``"2g"``; default none, since envs
    range from megabytes to many gigabytes: a container over it is OOM-killed and reported as
    such) and ``cpus`` (e.g. ``1.5``; default none). ``extra_run_args`` go to the SDK's
    ``containers.run`` as they are. Least privilege by default: all capabilities dropped,
    ``no-new-privileges``, the agent's own uid/gid (its sockets are mode 0600; an agent running as
    root runs its containers as nobody, ``user`` to choose), a read-only root
    filesystem with a writable tmpfs at /tmp as working directory (``read_only=False`` for envs
    that must write elsewhere), and a private IPC namespace with its own /dev/shm
    (``ipc_host=True`` for the host's IPC namespace, e.g. for envs that share memory with
    other host processes).
    """

    image: str = DEFAULT_IMAGE
    mem_limit: Optional[str] = None
    cpus: Optional[float] = None
    pids_limit: Optional[int] = 1024
    extra_run_args: tuple = ()
    read_only: bool = True
    ipc_host: bool = False
    user: Optional[str] = None
    name = "docker"
    agent_options: ClassVar[Optional[tuple[str, ...]]] = ("image", "mem_limit", "cpus", "pids_limit")
    operator_note: ClassVar[str] = (
        "containers of agents always run as a non-root user, with all capabilities dropped, no network, a "
        "read-only root and no mounts but the portal's run directory"
    )

    @classmethod
    def for_agent(cls, options: dict[str, Any], offer: HostOffer) -> Backend:
        memory, cpus, pids = offer.container_limits(options, default_pids=cls.pids_limit)
        image = offer.image(options.get("image", str(cls.image)))  # the host names it: no warning
        return cls(image=image, mem_limit=str(memory), cpus=cpus, pids_limit=pids)

    def __post_init__(self) -> None:
        if type(self.image) is DefaultImage:
            warn_default_image()
            object.__setattr__(self, "image", str(self.image))

    def container_user(self) -> tuple:
        """``user`` ("uid:gid"), else the agent's own uid:gid, but never root: an agent running
        as root gets its containers run as nobody (65534:65534), and hands them its resources."""
        if self.user:
            uid, _, gid = self.user.partition(":")
            return int(uid), int(gid or uid)
        if os.getuid() == 0:
            return NOBODY, NOBODY
        return os.getuid(), os.getgid()

    def trust_boundary(self) -> Optional[str]:
        return "container"

    def runtime_owner(self) -> Optional[tuple]:
        owner = self.container_user()
        return None if owner == (os.getuid(), os.getgid()) else owner

    def max_envs_per_server(self) -> Optional[int]:
        """From the image's ``portal-shm.max-envs-per-server`` label (stable-retro needs 1)."""
        try:
            value = docker_client().images.get(self.image).labels.get(LABEL_MAX_ENVS)
        except Exception:
            return None
        return int(value) if value else None

    def start(self, launch: ServerLaunch) -> ServerHandle:
        client = docker_client()
        import docker.errors

        run_dir = launch.run_dir
        tag = os.path.basename(run_dir)
        kwargs: dict = {
            "environment": {"PYTHONUNBUFFERED": "1"},
            "network_mode": "none",
            "volumes": {host_path(run_dir, client): {"bind": run_dir, "mode": "rw"}},
            "labels": {
                LABEL_OWNER: str(os.getpid()),
                LABEL_PORTAL: tag,
                LABEL_SERVER: str(launch.server_index),
                LABEL_ROLE: "env-server",
            },
            "name": f"{tag}-s{launch.server_index}" + (f".{launch.generation}" if launch.generation else ""),
            "detach": True,
            "init": True,
            "cap_drop": ["ALL"],
            "security_opt": ["no-new-privileges"],
            "user": "{}:{}".format(*self.container_user()),
            "read_only": self.read_only,
            "tmpfs": {"/tmp": "rw,exec,size=512m"},
            "working_dir": "/tmp",
        }
        kwargs["environment"]["HOME"] = "/tmp"
        agent_container = own_container_id()
        if agent_container:
            kwargs["labels"][LABEL_AGENT_CONTAINER] = agent_container
        kwargs["ipc_mode"] = "host" if self.ipc_host else "private"
        if self.mem_limit:
            kwargs["mem_limit"] = self.mem_limit
        if self.cpus:
            kwargs["nano_cpus"] = int(self.cpus * 1e9)
        if self.pids_limit:
            kwargs["pids_limit"] = self.pids_limit
        kwargs.update(dict(self.extra_run_args))
        try:
            warn_if_stale(self.image, client.images.get(self.image).labels or {})
        except docker.errors.ImageNotFound:
            raise PortalError(
                f"docker image {self.image!r} not found locally: build it first "
                f"(portal-shm build NAME|DIR -t {self.image}) or docker pull it"
            ) from None
        # (the run directory is bind-mounted at its own path: the file's path is the same inside)
        config = write_launch_config(launch, owner=self.runtime_owner())
        kwargs["environment"] = {**kwargs["environment"], CONFIG_ENV_VAR: config}
        try:
            container = client.containers.run(self.image, **kwargs)
        except docker.errors.APIError as exc:
            remove_config(config)
            raise PortalError(
                f"docker could not start a container of {self.image!r}: {exc.explanation or exc}"
            ) from None
        except BaseException:
            remove_config(config)
            raise
        return DockerHandle(container, self.image)
