"""The systems a benchmark compares, each built for real or skipped with the reason.

``portal-process`` and ``portal-docker`` are portal_shm on its backends; ``sync`` and ``async`` are
gymnasium's SyncVectorEnv and AsyncVectorEnv (shared_memory=True); ``envpool`` and ``portal-env``
run where their packages are installed. Nothing is ever stood in for a missing system: it is
reported as skipped, with why.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass, replace
from typing import Any, Callable, Optional

from .options import BenchOptions
from .scenarios import Scenario


def module_missing(module: str, install: str) -> Optional[str]:
    """None when ``module`` can be imported here, else the note a skipped system carries."""
    try:
        found = importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        found = False
    return None if found else f"not installed: `{module}` cannot be imported here ({install})"


@dataclass(frozen=True)
class System:
    """How to check and build one system. ``build(scenario, n, options)`` returns an object with
    gymnasium's vector API (``num_envs``, ``single_action_space``, ``reset``, ``step``, ``close``)."""

    name: str
    label: str
    module: str  # what must be importable for the system to run
    package: str  # its distribution, whose version the report gives
    install: str  # how to get it, for the skip note
    build: Callable[[Scenario, int, BenchOptions], Any]
    check: Optional[Callable[[Scenario, BenchOptions], Optional[str]]] = None  # per-scenario skip reason
    note: Optional[Callable[[Scenario], Optional[str]]] = None  # what differs from the others
    per_run: bool = False  # built afresh for each run and closed after: it burns CPU while idle

    def skip_reason(self, scenario: Scenario, options: BenchOptions) -> Optional[str]:
        reason = module_missing(self.module, self.install)
        if reason is None and self.check is not None:
            reason = self.check(scenario, options)
        return reason


def _build_portal(backend: str, views: bool = False) -> Callable[[Scenario, int, BenchOptions], Any]:
    """``views``: ring views (``copy=False``) in place of the default's fresh arrays."""

    def build(sc: Scenario, n: int, options: BenchOptions) -> Any:
        import portal_shm

        extra = {"image": sc.docker_image(options.image)} if backend == "docker" else {}
        vector_kwargs = {**options.vector_kwargs(), **({"copy": False} if views else {})}
        if sc.is_training:  # laid out as portal_shm.envpool does: a server per batch, ALE's threads inside
            vector_kwargs.setdefault("envs_per_server", vector_kwargs.get("batch_size", n))
        return portal_shm.make_vec(
            sc.target, n, backend=backend, vector_kwargs=vector_kwargs, env_kwargs=sc.kwargs, **extra
        )

    return build


def _check_docker(sc: Scenario, options: BenchOptions) -> Optional[str]:
    image = sc.docker_image(options.image)
    if image is None:
        return f"no docker image known for {sc.name}: pass --image IMAGE"
    from portal_shm.errors import PortalError
    from portal_shm.runtimes.docker import docker_client

    try:
        client = docker_client()
    except PortalError as exc:
        return str(exc)
    try:
        client.images.get(image)
    except Exception:
        return f"image {image} is not built here (portal-shm build {image.rsplit('/', 1)[-1]})"
    return None


def _build_sync(sc: Scenario, n: int, options: BenchOptions) -> Any:
    import gymnasium as gym

    return gym.vector.SyncVectorEnv([sc.env_fn() for _ in range(n)])


def _build_async(sc: Scenario, n: int, options: BenchOptions) -> Any:
    import gymnasium as gym

    return gym.vector.AsyncVectorEnv([sc.env_fn() for _ in range(n)], shared_memory=True)


def _build_portal_fns(sc: Scenario, n: int, options: BenchOptions) -> Any:
    """The one-line change from AsyncVectorEnv: the same factories, gymnasium's defaults (copy=True)."""
    from portal_shm import VectorPortal

    return VectorPortal([sc.env_fn() for _ in range(n)], shared_memory=True)


def _build_envpool(sc: Scenario, n: int, options: BenchOptions) -> Any:
    from .envpool_system import EnvpoolVector

    return EnvpoolVector(sc, n, options)


def _check_envpool(sc: Scenario, options: BenchOptions) -> Optional[str]:
    from .envpool_system import unsupported

    return unsupported(sc)


def _note_envpool(sc: Scenario) -> Optional[str]:
    from .envpool_system import differences

    return differences(sc)


def _build_ale_vector(sc: Scenario, n: int, options: BenchOptions) -> Any:
    from .ale_vector_system import AleVector

    return AleVector(sc, n, options)


def _check_ale_vector(sc: Scenario, options: BenchOptions) -> Optional[str]:
    from .ale_vector_system import unsupported

    return unsupported(sc)


def _note_ale_vector(sc: Scenario) -> Optional[str]:
    from .ale_vector_system import differences

    return differences(sc)


def _build_portal_env(sc: Scenario, n: int, options: BenchOptions) -> Any:
    from .portal_env_system import PortalEnvVector

    return PortalEnvVector(sc, n, options)


def _note_portal_env(sc: Scenario) -> Optional[str]:
    from .portal_env_system import DIFFERENCES

    return DIFFERENCES


def _build_remote(**kinds: bool) -> Callable[[Scenario, int, BenchOptions], Any]:
    def build(sc: Scenario, n: int, options: BenchOptions) -> Any:
        from .remote_systems import RemoteSystem

        return RemoteSystem(sc, n, options, **kinds)

    return build


def _build_rpc(sc: Scenario, n: int, options: BenchOptions) -> Any:
    from .remote_systems import RpcVector

    return RpcVector(sc, n, options)


def _build_ray(sc: Scenario, n: int, options: BenchOptions) -> Any:
    from .ray_systems import RaySystem

    return RaySystem(sc, n, options)


def _build_ray_naive(sc: Scenario, n: int, options: BenchOptions) -> Any:
    from .ray_systems import NaiveRayVector

    return NaiveRayVector(sc, n, options)


def _lockstep(build: Callable[[Scenario, int, BenchOptions], Any]) -> Callable[[Scenario, int, BenchOptions], Any]:
    """The same system stepped in lockstep, to set beside its async batches in one run."""
    return lambda sc, n, options: build(sc, n, replace(options, batch_size=None))


SYSTEMS: dict = {
    s.name: s
    for s in (
        System(
            "portal-process",
            "portal_shm (process backend)",
            "portal_shm",
            "portal-shm",
            "pip install portal-shm",
            _build_portal("process"),
        ),
        System(
            "portal-docker",
            "portal_shm (docker backend)",
            "docker",
            "portal-shm",
            "pip install 'portal-shm[docker]'",
            _build_portal("docker"),
            check=_check_docker,
        ),
        System("sync", "gymnasium SyncVectorEnv", "gymnasium", "gymnasium", "pip install gymnasium", _build_sync),
        System(
            "async",
            "gymnasium AsyncVectorEnv (shared_memory=True)",
            "gymnasium",
            "gymnasium",
            "pip install gymnasium",
            _build_async,
        ),
        System(
            "portal-fns",
            "portal_shm VectorPortal(env_fns), AsyncVectorEnv's arguments",
            "cloudpickle",
            "portal-shm",
            "pip install cloudpickle",
            _build_portal_fns,
        ),
        System(
            "envpool",
            "envpool",
            "envpool",
            "envpool",
            "pip install envpool",
            _build_envpool,
            check=_check_envpool,
            note=_note_envpool,
        ),
        System(
            "ale-vector",
            "ale_py AtariVectorEnv (C++ threads in the agent's process)",
            "ale_py",
            "ale-py",
            "pip install ale-py",
            _build_ale_vector,
            check=_check_ale_vector,
            note=_note_ale_vector,
        ),
        System(
            "portal-env",
            "portal-env (env server as a local process)",
            "portal_env",
            "portal-env",
            "pip install portal-env",
            _build_portal_env,
            note=_note_portal_env,
            per_run=True,
        ),
        System(
            "portal-lockstep",
            "portal_shm (process backend, lockstep even with --batch-size)",
            "portal_shm",
            "portal-shm",
            "pip install portal-shm",
            _lockstep(_build_portal("process")),
        ),
        System(
            "portal-views",
            "portal_shm (process backend, ring views: copy=False)",
            "portal_shm",
            "portal-shm",
            "pip install portal-shm",
            _build_portal("process", views=True),
        ),
        System(
            "envpool-lockstep",
            "envpool (lockstep even with --batch-size)",
            "envpool",
            "envpool",
            "pip install envpool",
            _lockstep(_build_envpool),
            check=_check_envpool,
            note=_note_envpool,
        ),
        System(
            "remote",
            "portal_shm remote backend: one env host over --rtt-ms/--rate-mbit",
            "zmq",
            "portal-shm",
            "pip install portal-shm",
            _build_remote(),
            per_run=True,
        ),
        System(
            "remote-lockstep",
            "portal_shm remote backend, lockstep over the same link",
            "zmq",
            "portal-shm",
            "pip install portal-shm",
            _build_remote(lockstep=True),
            per_run=True,
        ),
        System(
            "remote-x0",
            "portal_shm remote backend through a zero-delay proxy (X0)",
            "zmq",
            "portal-shm",
            "pip install portal-shm",
            _build_remote(zero_link=True),
            per_run=True,
        ),
        System(
            "remote-insecure",
            "portal_shm remote backend, --insecure (no CURVE)",
            "zmq",
            "portal-shm",
            "pip install portal-shm",
            _build_remote(insecure=True),
            per_run=True,
        ),
        System(
            "remote-rpc",
            "per-env RPC: one connection per env, stepped from threads, same link",
            "zmq",
            "portal-shm",
            "pip install portal-shm",
            _build_rpc,
            per_run=True,
        ),
        System(
            "ray",
            "portal_shm ray backend: one env host placed by a Ray of this machine",
            "ray",
            "ray",
            "pip install 'portal-shm[ray]'",
            _build_ray,
            per_run=True,
        ),
        System(
            "ray-naive",
            "one Ray actor per env, ray.get of every env's step each step",
            "ray",
            "ray",
            "pip install ray",
            _lockstep(_build_ray_naive),
            per_run=True,
        ),
    )
}


def supports_batches(envs: Any) -> bool:
    """Async batches need envpool's API (``send(actions, env_ids)``, ``recv()``) and a batch smaller
    than the envs (a system built for lockstep keeps stepping in lockstep)."""
    return (
        callable(getattr(envs, "send", None))
        and callable(getattr(envs, "recv", None))
        and getattr(envs, "batch_size", envs.num_envs) < envs.num_envs
    )


def close_quietly(envs: Any, failed: bool) -> Optional[str]:
    """Close a system whatever state it is in; returns the error text if closing failed."""
    import gymnasium as gym

    try:
        if failed and isinstance(envs, gym.vector.AsyncVectorEnv):
            envs.close(terminate=True)
        else:
            envs.close()
    except BaseException as exc:  # keep closing the others
        return f"closing {type(envs).__name__} failed: {exc!r}"
    return None
