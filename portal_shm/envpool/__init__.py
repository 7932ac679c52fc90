"""envpool's ``make`` and the API scripts written for envpool call, over portal-shm's isolated envs.

``import portal_shm.envpool as envpool`` in place of ``import envpool``: ``envpool.make("Pong-v5",
env_type="gym", num_envs=8, episodic_life=True, reward_clip=True)`` then behaves as envpool's
(spaces, ``reset``/``step``/``send``/``recv``/``async_reset``, infos and their dtypes, ``spec.config``),
while the games run in env servers of any backend (``backend="docker", image="portal-shm/ale"``,
remote hosts, Ray) with the preprocessing inside the env's runtime (``portal_shm.presets:atari``).

Why a layer of its own: envpool scripts rely on things a gymnasium ``VectorEnv`` does differently
(``action_space`` is one env's space; infos carry ``env_id``, ``lives`` and the unclipped ``reward``
as plain arrays; the gym type returns ``(obs, reward, done, info)``), and on envpool's option names.
An option is either mapped to what makes the same envs here or refused by name with the reason;
none is silently dropped, since a dropped ``episodic_life`` or ``reward_clip`` would train another
task without a word.

Tasks: envpool's Atari ids (``Pong-v5`` -> ``ALE/Pong-v5`` in the ``atari`` preset, with envpool's
defaults) and the ViZDoom scenarios that gymnasium's ViZDoom registers (``Basic-v1`` ->
``VizdoomBasic-v1`` in the ``vizdoom`` preset: RGB frames stacked as envpool's, but ViZDoom's
gymnasium action space and infos). Other envpool tasks are refused with what to use instead.

Arrays come back as fresh arrays by default, as envpool's do, since envpool scripts keep them
(rollout lists): ``vector_kwargs={"copy": False}`` returns ring views instead (valid for
``ring_depth - 1`` further calls, README "How long a returned batch stays valid").

The gym type's spaces are the ``gym`` package's classes where gym is installed, as envpool 0.x gave
them (cleanrl's envpool scripts assert ``isinstance(envs.action_space, gym.spaces.Discrete)``);
without gym they are gymnasium's.

Modules: ``tasks`` (envpool's ids and options, and the preset each becomes), ``pool`` (the env object
scripts hold), ``gym_spaces`` (gymnasium's spaces as gym's classes); ``make`` and its ``make_*`` forms
are here.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import warnings
from typing import Any, Optional, Union

import numpy as np

from ..api import make_vec
from ..cluster.backend import option_names as ray_option_names
from ..errors import EnvNotFoundError, HostPolicyError
from ..remote.client.backend import option_names as remote_option_names
from ..runtimes.backend import Backend
from ..runtimes.registry import BACKENDS, backend_option_names
from ..wire.ale_settings import vector_settings
from .pool import EnvPool, PoolSpec
from .tasks import (
    ATARI_DEFAULTS,
    COMMON_DEFAULTS,
    REFUSED_VALUES,
    VIZDOOM_CFG_OPTIONS,
    VIZDOOM_DEFAULTS,
    Task,
    preset_kwargs,
    task,
)

#: envpool's name for what ``env.spec`` holds, for scripts that import it from envpool; within
#: portal-shm it is ``PoolSpec``, apart from ``portal_shm.backends.EnvSpec`` (an env server's recipe).
EnvSpec = PoolSpec

__all__ = ["EnvPool", "EnvSpec", "PoolSpec", "Task", "make", "make_dm", "make_gym", "make_gymnasium", "task"]

ENV_TYPES = ("gymnasium", "gym", "dm")


def _backend_option_names(backend: Union[str, Backend]) -> set:
    """The keyword arguments that configure ``backend`` rather than envpool's task."""
    if backend in ("remote", "ray"):
        own = remote_option_names() if backend == "remote" else ray_option_names()
        runtimes = {field.name for cls in BACKENDS.values() for field in dataclasses.fields(cls)}
        return own | runtimes
    return backend_option_names(backend)


def make(
    task_id: str,
    env_type: str = "gymnasium",
    num_envs: int = 1,
    batch_size: Optional[int] = None,
    seed: Union[int, list, None] = 42,
    *,
    backend: Union[str, Backend] = "process",
    vector_kwargs: Optional[dict] = None,
    **options: Any,
) -> EnvPool:
    """envpool's ``make``: ``num_envs`` envs of envpool's ``task_id`` in portal-shm runtimes.

    ``options`` are envpool's (``episodic_life``, ``reward_clip``, ``noop_max``, ``stack_num``, ...:
    the task's, with envpool's defaults) or the backend's (``image=`` for ``backend="docker"``,
    ``hosts=`` for ``"remote"``, ...). ``batch_size`` below ``num_envs`` gives envpool's async
    batches. Atari games run in ALE's own vector env where it can host them (``native_layout``:
    a server per batch, ``num_threads`` ALE threads over them); elsewhere in per-env presets, where
    ``num_threads=k`` runs ``k`` env servers (``num_envs`` a multiple of ``k``).
    ``vector_kwargs`` go to the ``VectorPortal`` (``copy`` defaults to True here, see the module
    docstring). An option that does not apply raises, naming it and what to do instead.
    """
    if env_type not in ENV_TYPES:
        raise ValueError(f"env_type={env_type!r}: envpool's env types are {', '.join(map(repr, ENV_TYPES))}")
    if env_type == "dm":
        raise ValueError(
            "env_type='dm' (dm_env TimeSteps) is not provided by portal_shm.envpool: use env_type='gymnasium' "
            "or 'gym', which give the same envs (the discount is 1 - terminated)"
        )
    if not isinstance(num_envs, int) or num_envs < 1:
        raise ValueError(f"num_envs must be a positive integer, got {num_envs!r}")
    batch = num_envs if batch_size in (None, 0) else int(batch_size)
    if not 1 <= batch <= num_envs:
        raise ValueError(f"batch_size={batch_size} must lie between 1 and num_envs={num_envs}")
    spec = task(task_id)
    backend_names = _backend_option_names(backend)
    known = {**COMMON_DEFAULTS, **spec.defaults}
    env_seed = options.pop("env_seed", None)
    for key in ("base_path", "from_pixels", "render_mode"):
        if key in options:
            raise ValueError(
                f"{key}= does not apply to portal_shm.envpool: the env's runtime finds its ROMs and assets "
                "(ale-py, vizdoom) and renders nothing; drop it"
            )
    unknown = sorted(key for key in options if key not in known and key not in backend_names)
    if unknown:
        foreign = [key for key in unknown if key in VIZDOOM_CFG_OPTIONS or key in ATARI_DEFAULTS]
        if spec.family == "vizdoom" and foreign:
            raise ValueError(
                f"{', '.join(foreign)}: envpool's ViZDoom options are not mapped; gymnasium's ViZDoom takes "
                f"them from the scenario's .cfg. {task_id} here takes {', '.join(VIZDOOM_DEFAULTS)}"
            )
        raise TypeError(
            f"make({task_id!r}) got unknown options {unknown}: envpool's options for this task are "
            f"{', '.join(sorted(known))}; backend={backend!r} takes {', '.join(sorted(backend_names)) or 'none'}"
        )
    values = {**known, **{key: options[key] for key in options if key in known}}
    for key, reason in REFUSED_VALUES.items():
        if key in values and values[key] != known[key]:
            raise ValueError(f"{key}={values[key]!r} is not supported: {reason} (envpool's default: {known[key]!r})")
    if env_type == "gymnasium":
        if options.get("gym_reset_return_info") is False:
            raise ValueError("gym_reset_return_info=False: gymnasium's reset returns (obs, info); use env_type='gym'")
        values["gym_reset_return_info"] = True
    vector_kwargs = {"copy": True, **(vector_kwargs or {})}
    if batch < num_envs:
        vector_kwargs["batch_size"] = batch
    threads = int(values["num_threads"])
    if env_seed is not None:
        seed = list(env_seed)
    if isinstance(seed, (list, tuple, np.ndarray)) and len(seed) != num_envs:
        raise ValueError(f"a list of seeds needs one per env: got {len(seed)} for num_envs={num_envs}")
    env_kwargs = preset_kwargs(spec, values)
    backend_options = {key: options[key] for key in options if key in backend_names}
    native = native_layout(spec, env_kwargs, backend, vector_kwargs, num_envs, batch, threads)
    portal = None
    if native is not None:
        try:
            portal = make_vec(
                "portal_shm.presets:atari_vector",
                num_envs,
                backend=backend,
                vector_kwargs={**vector_kwargs, "envs_per_server": native["envs_per_server"]},
                env_kwargs={**env_kwargs, "num_threads": native["num_threads"]},
                **backend_options,
            )
        except (EnvNotFoundError, HostPolicyError) as exc:
            if "atari_vector" not in str(exc):
                raise
            warnings.warn(
                f"this runtime's portal-shm (its env side, or the env host) has no presets.atari_vector (an older "
                f"portal-shm): the games run per env, slower; upgrade it for ALE's vector env ({exc})",
                UserWarning,
                stacklevel=2,
            )
        else:
            if any(str(server.get("hosting")).startswith("per-env") for server in portal.servers):
                portal.close()  # this runtime has no ALE vector env: a server per core instead, as below
                portal = None
    if portal is None:
        if threads > 0:
            if num_envs % threads or "envs_per_server" in vector_kwargs:
                raise ValueError(
                    f"num_threads={threads} runs {threads} env servers, so num_envs={num_envs} must be a multiple "
                    "of it (and vector_kwargs must not set envs_per_server as well); num_threads=0 picks one per core"
                )
            vector_kwargs["envs_per_server"] = num_envs // threads
        portal = make_vec(
            f"portal_shm.presets:{spec.family}",
            num_envs,
            backend=backend,
            vector_kwargs=vector_kwargs,
            env_kwargs=env_kwargs,
            **backend_options,
        )
    try:
        reshape = None
        shape = portal.single_observation_space.shape
        if shape is not None and len(shape) == 4:  # (stack, 3, h, w) -> envpool's (3 * stack, h, w)
            reshape = (shape[0] * shape[1],) + tuple(shape[2:])
        config = {
            "num_envs": num_envs,
            "batch_size": batch,
            "seed": seed,
            **values,
            "task": spec.env_id.split("/")[-1].rsplit("-", 1)[0].lower() if spec.family == "atari" else task_id,
        }
        return EnvPool(portal, spec, env_type, config, seed, reshape)
    except BaseException:
        portal.close()
        raise


def native_layout(
    spec: Task,
    env_kwargs: dict,
    backend: Union[str, Backend],
    vector_kwargs: dict,
    num_envs: int,
    batch: int,
    threads: int,
) -> Optional[dict]:
    """Where ALE's own vector env can host the games (``presets.atari_vector``): one env server per
    batch (``envs_per_server``), ALE's C++ threads inside it (``num_threads``: envpool's
    ``num_threads`` shared over the servers; 0, the default, lets each server share the cores of
    its runtime with the portal's other servers there), so each step is one call in the runtime. None where it cannot: not
    Atari, options it has no equivalent for, the caller fixed ``envs_per_server``, or this
    agent's own runtime (``backend="process"``) lacks it."""
    if spec.family != "atari" or "envs_per_server" in vector_kwargs:
        return None
    options = {key: value for key, value in env_kwargs.items() if key != "env_id"}
    if isinstance(vector_settings(spec.env_id, options), str):
        return None
    if backend == "process" and not _has_module("ale_py.vector_env"):
        return None
    per_server = min(batch, max(1, threads // (num_envs // batch))) if threads > 0 else 0
    return {"envs_per_server": batch, "num_threads": per_server}


def _has_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except ImportError:
        return False


def make_gymnasium(task_id: str, **kwargs: Any) -> EnvPool:
    """``make(task_id, env_type="gymnasium", ...)``."""
    return make(task_id, "gymnasium", **kwargs)


def make_gym(task_id: str, **kwargs: Any) -> EnvPool:
    """``make(task_id, env_type="gym", ...)``: ``reset()`` returns observations, ``step`` 4-tuples."""
    return make(task_id, "gym", **kwargs)


def make_dm(task_id: str, **kwargs: Any) -> EnvPool:
    """``make(task_id, env_type="dm")``, which is refused (see ``make``)."""
    return make(task_id, "dm", **kwargs)
