"""``portal-shm agent IMAGE -- COMMAND``: a training command in a container that starts env
containers beside it through the host's Docker socket, the ring still handed over zero-copy.

What the agent container gets, and why:

- the Docker socket, and the socket's group (``--group-add``): its user is not root, and the
  socket is ``root:docker 0660`` on most hosts;
- a shared run directory, ``$PORTAL_SHM_AGENTS_DIR/NAME`` (default ``/tmp/portal-shm-agents/NAME``)
  bind-mounted at the same path, with ``PORTAL_SHM_RUN_DIR`` pointing there: env containers must
  mount the agent's sockets and lock file, and the daemon can only mount what is on its host;
- the caller's uid:gid (a root caller's agent runs as 1000:1000, the agent image's user), which
  owns that directory, so the agent's 0600 sockets are its and its env containers' alone;
- the current directory at ``/workspace`` (the working directory), ``--gpus`` as ``docker run
  --gpus`` takes it, and ``-e`` variables.

This process stays in front: it streams the command's output, turns Ctrl-C/SIGTERM into a
``docker stop`` of the agent, and however the agent ends (exit, error, SIGKILL) it removes the
agent's container, the env containers labelled with its id, and the shared directory, then
returns the command's exit code.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import sys
import threading
import time
from typing import Any, Optional, Sequence

from ..errors import PortalError
from .agent_container import LABEL_AGENT_CONTAINER, host_path, socket_problem
from .docker import LABEL_OWNER, LABEL_ROLE, docker_client

AGENTS_DIR_ENV_VAR = "PORTAL_SHM_AGENTS_DIR"
AGENT_PREFIX = "psm-agent-"
ROOT_CALLER_USER = (1000, 1000)  # the agent image's ``agent`` user
SOCKET_IN_CONTAINER = "/var/run/docker.sock"
WORKDIR = "/workspace"
ORPHAN_AGE_S = 60


class _Stop(Exception):
    """SIGINT or SIGTERM arrived: stop the agent container, then clean up."""


def agents_dir() -> str:
    """Where ``portal-shm agent`` makes the run directories it shares with the host."""
    return os.environ.get(AGENTS_DIR_ENV_VAR) or "/tmp/portal-shm-agents"


def docker_socket() -> str:
    """The Docker socket this process talks through (``DOCKER_HOST`` or the default)."""
    host = os.environ.get("DOCKER_HOST", "unix://" + SOCKET_IN_CONTAINER)
    if not host.startswith("unix://"):
        raise PortalError(
            f"portal-shm agent mounts the Docker socket into the agent's container, and DOCKER_HOST={host} is "
            "not a unix socket: run it on the Docker host itself"
        )
    return host[len("unix://") :]


def device_requests(gpus: Optional[str]) -> list:
    """``docker run --gpus`` in the SDK's terms: ``all``, a count, or ``device=0,1``."""
    if not gpus:
        return []
    from docker.types import DeviceRequest

    value = gpus.strip().strip("\"'")
    if value == "all":
        return [DeviceRequest(count=-1, capabilities=[["gpu"]])]
    if value.isdigit():
        return [DeviceRequest(count=int(value), capabilities=[["gpu"]])]
    if value.startswith("device="):
        return [DeviceRequest(device_ids=value[len("device=") :].split(","), capabilities=[["gpu"]])]
    raise ValueError(f"--gpus {gpus}: expected all, a number, or device=ID[,ID...] (as docker run --gpus)")


def agent_user(user: Optional[str]) -> tuple:
    """``user`` ("uid[:gid]"), else the caller's uid:gid, never root."""
    if user:
        uid, _, gid = user.partition(":")
        return int(uid), int(gid or uid)
    if os.getuid() == 0:
        return ROOT_CALLER_USER
    return os.getuid(), os.getgid()


def environment(pairs: Sequence[str]) -> dict:
    """``KEY=VALUE`` as given, a bare ``KEY`` from this process's environment (as docker run -e)."""
    env = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if sep:
            env[key] = value
        elif key in os.environ:
            env[key] = os.environ[key]
    return env


def make_shared_dir(name: str, owner: tuple) -> str:
    """``agents_dir()/name``, mode 0700, owned by the agent's user; the parent is sticky like /tmp
    (and removed by the last agent that leaves it empty: ``remove_agent``)."""
    base = agents_dir()
    shared = os.path.join(base, name)
    for attempt in range(3):
        if not os.path.isdir(base):
            os.makedirs(base, exist_ok=True)
            os.chmod(base, 0o1777)
        try:
            os.mkdir(shared, 0o700)
            break
        except FileNotFoundError:  # (another agent removed the empty parent just now)
            if attempt == 2:
                raise
    if owner != (os.getuid(), os.getgid()):
        os.chown(shared, *owner)
    return shared


def remove_agent(client: Any, container: Any, shared: str) -> None:
    """The agent's env containers (by the agent-container label), the agent's container, its directory."""
    for env in client.containers.list(all=True, filters={"label": LABEL_AGENT_CONTAINER}):
        owner = env.labels.get(LABEL_AGENT_CONTAINER, "")
        if owner and (container.id.startswith(owner) or owner == container.name):
            env.remove(force=True)
    try:
        container.remove(force=True)
    except Exception:
        pass
    shutil.rmtree(shared, ignore_errors=True)
    try:
        os.rmdir(os.path.dirname(shared))  # (the last agent out leaves nothing in /tmp)
    except OSError:
        pass


def _stream(source: Any, sink: Any) -> None:
    try:
        for chunk in source:
            sink.write(chunk)
            sink.flush()
    except Exception:  # the container went away while we read
        pass


def run_agent(
    image: str,
    command: Sequence[str],
    gpus: Optional[str] = None,
    env: Sequence[str] = (),
    user: Optional[str] = None,
    volumes: Sequence[str] = (),
    mount_cwd: bool = True,
    name: Optional[str] = None,
    network: Optional[str] = None,
    stop_timeout: float = 10.0,
) -> int:
    """Run ``command`` in a container of ``image`` set up to start env containers beside it; returns
    its exit code once the agent's container and everything it started are removed.

    ``volumes`` are extra ``HOST:CONTAINER[:ro]`` binds (e.g. keys for ``backend="remote"``);
    ``network`` is docker's (default: its bridge; ``"host"`` reaches env hosts on the host's loopback).
    """
    client = docker_client()
    socket = docker_socket()
    problem = socket_problem(socket)
    if problem:
        raise PortalError(problem)
    name = name or AGENT_PREFIX + secrets.token_hex(4)
    owner = agent_user(user)
    binds = {host_path(socket, client): {"bind": SOCKET_IN_CONTAINER, "mode": "rw"}}
    for volume in volumes:
        source, _, rest = volume.partition(":")
        target, _, mode = rest.partition(":")
        if not target:
            raise ValueError(f"--volume {volume}: expected HOST:CONTAINER[:ro]")
        binds[host_path(os.path.abspath(source), client)] = {"bind": target, "mode": mode or "rw"}
    if mount_cwd:
        binds[host_path(os.getcwd(), client)] = {"bind": WORKDIR, "mode": "rw"}
    shared = make_shared_dir(name, owner)
    binds[host_path(shared, client)] = {"bind": shared, "mode": "rw"}
    variables = {"HOME": "/tmp", "PYTHONUNBUFFERED": "1", **environment(env), "PORTAL_SHM_RUN_DIR": shared}
    try:
        container = client.containers.create(
            image,
            list(command),
            name=name,
            user="{}:{}".format(*owner),
            group_add=[str(os.stat(socket).st_gid)],
            environment=variables,
            volumes=binds,
            working_dir=WORKDIR if mount_cwd else None,
            labels={LABEL_ROLE: "agent", LABEL_OWNER: str(os.getpid())},
            device_requests=device_requests(gpus),
            init=True,
            ipc_mode="private",
            network_mode=network,
        )
    except Exception as exc:
        shutil.rmtree(shared, ignore_errors=True)
        explanation = getattr(exc, "explanation", None) or exc
        raise PortalError(f"docker could not create the agent container of {image!r}: {explanation}") from None
    previous: dict = {}
    if threading.current_thread() is threading.main_thread():

        def stop(signum: int, frame: Any) -> None:
            for sig in previous:  # a second Ctrl-C must not cut the clean-up short
                signal.signal(sig, signal.SIG_IGN)
            raise _Stop()

        previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        try:
            code = _attach_and_wait(container)
        except _Stop:
            container.stop(timeout=max(1, int(stop_timeout)))
            code = container.wait()["StatusCode"]
        return int(code)
    finally:
        remove_agent(client, container, shared)
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _attach_and_wait(container: Any) -> int:
    """Start ``container`` with its stdout and stderr streamed to ours; its exit code."""
    streams = [
        threading.Thread(target=_stream, args=(container.attach(stream=True, **which), sink), daemon=True)
        for which, sink in (
            ({"stdout": True, "stderr": False}, sys.stdout.buffer),
            ({"stdout": False, "stderr": True}, sys.stderr.buffer),
        )
    ]
    for thread in streams:
        thread.start()
    container.start()
    code = container.wait()["StatusCode"]
    for thread in streams:
        thread.join(timeout=2.0)
    return int(code)


def orphaned_agent_dirs(client: Any) -> list:
    """Shared directories of ``portal-shm agent`` whose agent is gone (its front process was killed
    before it could remove them): their container exists and has stopped, or there is none and the
    directory is older than ``ORPHAN_AGE_S`` (a front process creates the container right after it)."""
    import docker.errors

    base = agents_dir()
    try:
        entries = sorted(entry for entry in os.listdir(base) if entry.startswith(AGENT_PREFIX))
    except OSError:
        return []
    found = []
    for entry in entries:
        path = os.path.join(base, entry)
        try:
            gone = client.containers.get(entry).status in ("exited", "dead")
        except docker.errors.NotFound:
            try:
                gone = time.time() - os.stat(path).st_mtime > ORPHAN_AGE_S
            except OSError:
                continue
        if gone:
            found.append(path)
    return found
