"""``make_vec`` and ``make``: gymnasium's constructors, with the env in its own runtime.

The one place that knows every kind of portal: a local ``VectorPortal`` for the local runtimes,
a ``RemoteVectorPortal`` for envs on hosts elsewhere (``backend="remote"``), a ``RayVectorPortal``
for hosts that Ray places on a cluster's nodes (``backend="ray"``). Everything a call can get wrong
(a mode, a backend name, an option, a vector option, a wrapper a runtime cannot take) is refused
here, before any server starts; ``agent/contract/env_arguments.py`` decides which keyword
arguments are the env's.
"""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any, Callable, Optional, Sequence, Union

from gymnasium import VectorizeMode

from .agent.contract.base import PortalVectorEnv
from .agent.contract.env_arguments import split_kwargs
from .agent.contract.options import HOSTED
from .agent.local.env_fns import check_wrappers
from .agent.local.spec import EnvSpec
from .agent.portal_env import Portal
from .agent.vector import VectorPortal
from .cluster.backend import RayBackend
from .cluster.backend import option_names as ray_option_names
from .errors import PortalError, did_you_mean
from .remote.client.backend import RemoteBackend
from .remote.client.backend import option_names as remote_option_names
from .runtimes.backend import Backend
from .runtimes.registry import (
    HOSTED_BACKENDS,
    backend_class,
    backend_option_names,
    hosted_option_names,
    resolve_backend,
)
from .tuning import PathOrDict, merge_tuning, resolve_tuning

#: gymnasium's ``VectorizeMode`` values; a portal takes the first two (``_check_mode``).
MODES = ("async", "sync", "vector_entry_point")
#: The keys ``vector_kwargs`` takes for a local portal: VectorPortal's keyword arguments (``Portal``'s
#: are the same) but ``backend``, which is ``make_vec``'s own.
LOCAL_VECTOR_OPTIONS = tuple(
    name for name in list(inspect.signature(VectorPortal.__init__).parameters)[2:] if name != "backend"
)  # (self, env_fns)
#: ... and for envs on hosts: what the hosts apply, and ``copy``, which the agent applies.
HOSTED_VECTOR_OPTIONS = (*HOSTED, "copy")


def _check_mode(mode: Any) -> None:
    """``vectorization_mode``: None, ``"async"`` or ``"sync"`` (or gymnasium's ``VectorizeMode``)."""
    value = getattr(mode, "value", mode)
    if mode is None or value in MODES[:2]:
        return
    if value == "vector_entry_point":
        raise ValueError(
            "vectorization_mode='vector_entry_point' makes all envs in one process from the id's vector entry "
            "point; a portal makes each env by its id in its own runtime (envs_per_server envs per server "
            "process): leave vectorization_mode out, or use gymnasium.make_vec for that mode"
        )
    hint = did_you_mean(value, MODES)
    raise ValueError(
        f"Invalid vectorization mode: {mode!r}{hint + ' Valid' if hint else ', valid'} modes: {list(MODES)}"
    )


def _check_vector_kwargs(vector_kwargs: Any, allowed: tuple[str, ...]) -> dict[str, Any]:
    if vector_kwargs is None:
        return {}
    if not isinstance(vector_kwargs, dict):
        raise TypeError(f"vector_kwargs must be a dict, got {type(vector_kwargs).__name__}")
    for key in vector_kwargs:
        if key not in allowed:
            hint = did_you_mean(key, allowed)
            raise TypeError(
                f"vector_kwargs key {str(key)[:100]!r} is not one this portal takes{hint + ' It' if hint else '; it'} "
                f"takes {', '.join(allowed)}"
            )
    return dict(vector_kwargs)


def _hosted_backend(backend: Any) -> bool:
    return (isinstance(backend, str) and backend in HOSTED_BACKENDS) or isinstance(backend, (RemoteBackend, RayBackend))


def _spec(
    id: str,
    backend: Union[str, Backend],
    env_kwargs: Optional[dict[str, Any]],
    kwargs: dict[str, Any],
    vector_names: tuple[str, ...],
    wrappers: Sequence[Callable[[Any], Any]] = (),
) -> EnvSpec:
    """Split keyword arguments into the backend's options and the env's kwargs (``split_kwargs``)."""
    label = backend.name if isinstance(backend, Backend) else backend_class(backend).name
    options, env = split_kwargs(id, label, backend_option_names(backend), vector_names, kwargs)
    resolved = resolve_backend(backend, **options)  # (VectorPortal refuses wrappers its runtime cannot load)
    return EnvSpec(id, {**env, **(env_kwargs or {})}, resolved, wrappers=tuple(wrappers))


def _hosted(
    id: str,
    num_envs: int,
    backend: Union[str, RemoteBackend, RayBackend],
    vector_kwargs: dict[str, Any],
    env_kwargs: Optional[dict[str, Any]],
    kwargs: dict[str, Any],
) -> PortalVectorEnv:
    """Envs on env hosts (``"remote"``: started by hand; ``"ray"``: placed by Ray): options of the
    backend, then those of the hosts' runtime, then the env's."""
    ray = backend == "ray" or isinstance(backend, RayBackend)
    label = "ray" if ray else "remote"
    if isinstance(backend, (RemoteBackend, RayBackend)):
        hosted = backend
        _, env = split_kwargs(id, label, set(), HOSTED_VECTOR_OPTIONS, kwargs)
    else:
        cls, names = (RayBackend, ray_option_names()) if ray else (RemoteBackend, remote_option_names())
        runtime = kwargs.get("runtime", "process")
        runtime_names = hosted_option_names(runtime) if isinstance(runtime, str) else set()
        options, env = split_kwargs(id, label, names | runtime_names, HOSTED_VECTOR_OPTIONS, kwargs)
        hosted = cls(**{key: value for key, value in options.items() if key in names})
        picked = {key: value for key, value in options.items() if key not in names}
        hosted = dataclasses.replace(hosted, runtime_options={**hosted.runtime_options, **picked})
    copy = bool(vector_kwargs.pop("copy", True))
    env_kwargs = {**env, **(env_kwargs or {})}
    if ray:
        from .cluster.vector import RayVectorPortal

        return RayVectorPortal(id, num_envs, hosted, env_kwargs, copy=copy, **vector_kwargs)
    from .remote.client.vector import RemoteVectorPortal

    return RemoteVectorPortal(id, num_envs, hosted, env_kwargs, copy=copy, **vector_kwargs)


def make_vec(
    id: str,
    num_envs: int = 1,
    vectorization_mode: Optional[Union[str, VectorizeMode]] = None,
    vector_kwargs: Optional[dict[str, Any]] = None,
    wrappers: Optional[Sequence[Callable[[Any], Any]]] = None,
    *,
    backend: Union[str, Backend] = "process",
    env_kwargs: Optional[dict[str, Any]] = None,
    tune: Optional[PathOrDict] = None,
    **kwargs: Any,
) -> PortalVectorEnv:
    """Create ``num_envs`` copies of env ``id``, each in an isolated runtime, batched as one vector env.

    ``gymnasium.make_vec``'s signature, and its results: a portal steps the same envs to the same
    observations, rewards and infos as ``SyncVectorEnv`` (same seeds, same trajectories), with the
    envs in other processes, venvs, containers or machines and the batches in shared memory.

    Args:
        id: A registered env id (``"CartPole-v1"``, ``"ALE/Pong-v5"``: plugins such as ``ale_py``
            are imported inside the runtime) or an entry point ``"package.module:callable"``.
        num_envs: How many copies of the env to step, a positive integer.
        vectorization_mode: As ``gymnasium.make_vec``'s: ``None`` (default), ``"async"`` or
            ``"sync"`` (or gymnasium's ``VectorizeMode``) all make the same portal: its envs always
            step in their own runtimes, at once, and its results are ``SyncVectorEnv``'s either way
            (it has no ``envs`` list of env objects; ``AsyncVectorEnv`` has none either).
            ``"vector_entry_point"`` is refused: that mode makes every env in one process.
        vector_kwargs: Options of the portal (``VectorPortal``'s keyword arguments, where each is
            described): ``copy`` (True: fresh arrays; False: writable views of the ring, valid for
            ``ring_depth - 1`` further calls), ``autoreset_mode`` (NEXT_STEP), ``batch_size`` (None:
            lockstep; smaller than ``num_envs``: envpool-style async batches), ``envs_per_server``
            (default: spread over the CPU cores), ``ring_depth`` (4), ``step_timeout`` (None),
            ``startup_timeout`` (120 s), ``on_env_failure`` (``"raise"`` or ``"restart"``),
            ``max_restarts`` (3), ``recycle`` (None), ``info_capacity`` (4096 bytes), ``infos``
            (``"exact"``), ``server_start`` (``"fork"``: servers of a kind forked from one warm
            zygote where the backend allows; ``"fresh"``), ``spin_wait``, ``max_ring_bytes``, ``observation_mode``,
            ``shared_memory``, ``max_concurrency``. Envs on hosts (``"remote"``, ``"ray"``) take
            ``copy`` and what their hosts apply (not ``spin_wait``, ``max_ring_bytes`` nor the
            AsyncVectorEnv ones). A key that is none of these is refused, naming the one it is
            close to.
        wrappers: Callables applied in turn to each env inside its runtime (``wrapper(env)``:
            wrapper classes, ``functools.partial``, lambdas), as ``gymnasium.make_vec`` applies
            them. They are shipped as code (cloudpickle), so only to runtimes the agent starts
            with its own Python: the ``"process"`` and ``"venv"`` backends; the others refuse them
            (wrap the env inside an entry point installed there instead).
        backend: Where the envs run, by name with its options as keyword arguments (defaults in
            parentheses), or a ``Backend`` instance (``portal_shm.backends``):

            - ``"process"`` (default): a Python process per env server on this machine;
              ``python`` (None: the agent's interpreter).
            - ``"venv"``: servers in a cached venv; ``requirements`` (``()``),
              ``requirements_file`` (None), ``python`` (None: the agent's, as the venv's base),
              ``cache_dir`` (None: ``$PORTAL_SHM_CACHE`` or ``~/.cache/portal-shm``).
            - ``"micromamba"``: servers in a cached conda env; ``spec`` (required: an env
              ``.yml``), ``setup_script`` (None), ``cache_dir`` (None).
            - ``"docker"``: a container per server; ``image`` (``"portal-shm/ale"``), ``mem_limit``
              (None), ``cpus`` (None), ``pids_limit`` (1024), ``extra_run_args`` (``()``),
              ``read_only`` (True), ``ipc_host`` (False), ``user`` (None: the agent's uid).
            - ``"attach"``: servers started by listeners already running; ``address`` (the
              listeners' ``ipc://PATH``, required).
            - ``"remote"``: env hosts started with ``portal-shm host``; ``hosts`` (None:
              ``$PORTAL_SHM_HOSTS``), ``counts`` (None: spread evenly), ``runtime``
              (``"process"``), ``runtime_options`` (``{}``), ``compression`` (``"auto"``),
              ``heartbeat_interval`` (1.0 s), ``heartbeat_timeout`` (10.0 s), ``connect_timeout``
              (15.0 s), ``insecure`` (False), ``client_key`` (None), ``host_key`` (None); the
              hosts' runtime's options by name too (``image=`` with ``runtime="docker"``).
            - ``"ray"``: env hosts that Ray places on a cluster's nodes; ``address`` (None),
              ``num_hosts`` (None), ``hosts_per_node`` (1), ``cpus_per_host`` (1.0), ``strategy``
              (None), ``counts`` (None), ``placement_timeout`` (60.0 s), ``host_policy`` (None),
              and ``runtime``, ``runtime_options``, ``compression``, ``heartbeat_interval``,
              ``heartbeat_timeout`` and ``connect_timeout`` as for ``"remote"``.

            Backends a project registered (``register_backend``) take their fields as options.
        env_kwargs: Keyword arguments for the env's constructor, passed as they are: for names
            that are also a backend's options, or that the check below would refuse.
        tune: What ``portal-shm tune ID -n N --write FILE`` measured best on this machine: that
            file's path, its dict, or ``load_tuning``'s result. Its ``vector_kwargs`` go under the
            explicit ``vector_kwargs`` (those win).
        **kwargs: A keyword named like an option of ``backend`` configures the backend; every other
            goes to the env's constructor inside its runtime (``gymnasium.make(id, **kwargs)``). One
            that is only *close* to a backend option or a ``vector_kwargs`` key (``imag=`` for
            docker's ``image=``, ``batch_sise=``; difflib's ratio 0.8 or more) is checked against
            what the env takes, as far as the agent can tell without starting anything (an id
            registered in the agent's gymnasium: its spec's kwargs, ``gymnasium.make``'s own and
            its entry point's parameters; a ``"module:callable"`` the agent has imported): if the
            env does not take it, a ``TypeError`` says which option was meant; if the env takes it
            (or takes ``**kwargs``), it goes to the env; where the agent cannot tell, it goes to
            the env with a warning that names the option. A legitimate env argument is never
            refused.

    Returns:
        The vector env, a ``PortalVectorEnv`` (a gymnasium ``VectorEnv``): a ``VectorPortal`` for
            the local backends, a ``RemoteVectorPortal`` or ``RayVectorPortal`` for envs on hosts.
            Close it (``close()`` or a ``with`` block) to stop its envs.

    Raises:
        TypeError: A keyword argument close to a backend option or a ``vector_kwargs`` key that
            the env does not take, or a ``vector_kwargs`` key no portal takes (each naming what was
            meant), or ``wrappers`` that are not callables. Raised before any server starts.
        ValueError: ``num_envs`` is not a positive integer, ``vectorization_mode`` is not one a
            portal takes, or a vector kwarg is out of its bounds. Before any server starts.
        PortalError: ``backend`` is no backend's name (naming the one it is close to), a backend
            cannot take ``wrappers``, or it cannot start the envs: Docker unreachable or the image
            missing, an env host unreachable, no Ray node to place a host on, and the like.
        EnvNotFoundError: ``id`` is no registered env or entry point in the envs' runtime; the
            message says what was searched and what to do.
        EnvError: An env raised while it was made (the error is also the env's own type).
        ServerDiedError: An env server exited while starting; its log tail is in the message.
        PortalTimeoutError: The servers did not start within ``startup_timeout``.
        ProtocolMismatchError: A server speaks another protocol version (an image of another
            portal-shm: rebuild it).
        ConfigTooLargeError: A server's config (its env kwargs, mostly) is too large to hand over.
        HostPolicyError: An env host's operator does not allow the env, an option or a kwarg
            (``backend="remote"`` or ``"ray"``); the message names the flag that would.
        TuningError: ``tune`` was measured for another ``id`` or ``num_envs`` (also a ``ValueError``).

    Examples:
        >>> import numpy as np
        >>> import portal_shm
        >>> envs = portal_shm.make_vec("CartPole-v1", 4, vectorization_mode="async")
        >>> envs
        VectorPortal(CartPole-v1, num_envs=4)
        >>> obs, infos = envs.reset(seed=42)
        >>> obs.shape
        (4, 4)
        >>> obs, rewards, terminations, truncations, infos = envs.step(np.array([0, 1, 0, 1]))
        >>> rewards
        array([1., 1., 1., 1.])
        >>> envs.close()

        The same envs in containers, four to a server, with views instead of copies:
        ``make_vec("CartPole-v1", 8, backend="docker", image="portal-shm/ale",
        vector_kwargs={"envs_per_server": 4, "copy": False})``.
    """
    if not isinstance(num_envs, int) or isinstance(num_envs, bool) or num_envs < 1:
        raise ValueError(f"num_envs must be a positive integer, got {num_envs!r}")
    _check_mode(vectorization_mode)
    hosted = _hosted_backend(backend)
    chosen = check_wrappers(wrappers) if wrappers is not None else ()
    if chosen and hosted:
        raise PortalError(
            f"wrappers cannot go to env hosts (backend={getattr(backend, 'name', backend)!r}): they are code, and "
            "hosts take none from agents. Wrap the env where it is made instead: a 'package.module:callable' "
            "entry point installed on the hosts that makes the env and applies the wrappers"
        )
    if tune is not None:
        vector_kwargs = merge_tuning(resolve_tuning(tune, id, num_envs), vector_kwargs)
    names = HOSTED_VECTOR_OPTIONS if hosted else LOCAL_VECTOR_OPTIONS
    checked = _check_vector_kwargs(vector_kwargs, names)
    if hosted:
        return _hosted(id, num_envs, backend, checked, env_kwargs, dict(kwargs))  # type: ignore[arg-type]
    spec = _spec(id, backend, env_kwargs, dict(kwargs), names, chosen)
    return VectorPortal([spec] * num_envs, **checked)


def make(
    id: str,
    *,
    backend: Union[str, Backend] = "process",
    vector_kwargs: Optional[dict[str, Any]] = None,
    env_kwargs: Optional[dict[str, Any]] = None,
    **kwargs: Any,
) -> Portal:
    """One env ``id`` in an isolated runtime, as a plain ``gymnasium.Env``; arguments as ``make_vec``'s."""
    names = LOCAL_VECTOR_OPTIONS
    checked = _check_vector_kwargs(vector_kwargs, names)
    return Portal(_spec(id, backend, env_kwargs, dict(kwargs), names), **checked)
