"""``VectorPortal(env_fns)``: gymnasium's ``AsyncVectorEnv`` arguments on portal-shm.

Code written for ``gymnasium.vector.AsyncVectorEnv(env_fns, ...)`` runs unchanged on a
VectorPortal. What that takes, and why it lives here rather than in ``vector.py``:

- Env factories (lambdas, closures, ``functools.partial``, classes) are the agent's code. They
  are pickled with cloudpickle into the portal's private run directory and unpickled by the env
  server: code travels only from the agent to a runtime the agent starts itself, with the same
  Python version (process and venv backends). Results and infos still come back as msgpack only;
  the agent never unpickles anything.
- AsyncVectorEnv's options that concern its worker processes either map onto portal-shm
  (``max_concurrency`` caps the number of env servers) or cannot apply (``worker``) and are
  refused with a clear error; ``context`` and ``daemon`` are checked and documented as ignored.
- ``shared_memory=True`` refuses the spaces gymnasium cannot put in shared memory, with its
  errors, so that code and tests that rely on those errors behave the same.
- Custom spaces that cannot be described as data are obtained, as gymnasium does, from one env
  made in the agent; errors of envs are logged as gymnasium's workers log them.
"""

from __future__ import annotations

import multiprocessing
import os
import sys
from typing import Any, Callable, Optional, Sequence, Union

from gymnasium import logger
from gymnasium.error import CustomSpaceError

from ...errors import EnvError, PortalError
from ...runtimes.backend import Backend
from ...runtimes.process import ProcessBackend
from ...runtimes.venv import VenvBackend
from ..contract import grouping
from .spec import EnvSpec

EnvFactory = Callable[[], Any]


def describe(factory: EnvFactory) -> str:
    """A readable name for a factory, used where an env id would be (messages, ``repr``)."""
    name = getattr(factory, "__qualname__", None) or getattr(getattr(factory, "func", None), "__qualname__", None)
    module = getattr(factory, "__module__", None) or getattr(getattr(factory, "func", None), "__module__", None)
    name = name or type(factory).__qualname__
    return f"{module}.{name}" if module else name


def to_specs(env_fns: Sequence[Union[EnvSpec, EnvFactory]], backend: Union[str, Backend]) -> tuple[list[EnvSpec], bool]:
    """EnvSpecs for a mix of specs and factories; also whether any factory is shipped."""
    items = list(env_fns)
    if not items:
        raise ValueError("VectorPortal needs at least one env (a callable that makes it, or an EnvSpec)")
    specs: list[EnvSpec] = []
    resolved: Optional[Backend] = None
    for index, item in enumerate(items):
        if isinstance(item, EnvSpec):
            if item.wrappers:
                check_wrappers(item.wrappers)
                check_backend(item.backend, WRAPPERS)
            specs.append(item)
        elif callable(item):
            if resolved is None:
                from ...runtimes.registry import resolve_backend

                resolved = resolve_backend(backend)
                check_backend(resolved)
            specs.append(EnvSpec(describe(item), backend=resolved, factory=item))
        else:
            raise TypeError(
                f"VectorPortal(env_fns) takes callables that make an env (as gymnasium's AsyncVectorEnv) or "
                f"portal_shm.backends.EnvSpec; item {index} is a {type(item).__name__}"
            )
    return specs, resolved is not None


#: What ``check_backend`` says of the code it checks, and what to do instead.
FACTORIES = (
    "env factories (callables)",
    "Name the env instead: an env id or a 'package.module:callable' entry point (portal_shm.make_vec or EnvSpec)",
)
WRAPPERS = (
    "wrappers (callables)",
    "Wrap the env where it is made instead: a 'package.module:callable' entry point, installed in the "
    "env's runtime, that makes the env and applies the wrappers",
)


def check_backend(backend: Backend, code: tuple[str, str] = FACTORIES) -> None:
    """Factories and wrappers need a runtime the agent starts with its own Python version
    (cloudpickle ships bytecode). ``code``: what is shipped, and the advice where it cannot be."""
    what, instead = code
    if isinstance(backend, ProcessBackend):
        python = backend.python or sys.executable
    elif isinstance(backend, VenvBackend):
        python = backend.base_python()
    else:
        raise PortalError(
            f"{what} cannot be shipped to the {backend.name!r} backend: they travel as cloudpickled code, which "
            f"only runtimes the agent starts with its own Python can load (the 'process' and 'venv' backends). "
            f"{instead}"
        )
    if python == sys.executable:
        return
    from ...runtimes.cache import python_version

    theirs = python_version(python).split()[0].split(".")[:2]
    ours = sys.version.split()[0].split(".")[:2]
    if theirs != ours:
        raise PortalError(
            f"{what} need the agent's Python version in the env runtime (cloudpickle ships bytecode): the agent "
            f"runs Python {'.'.join(ours)}, {python} is Python {'.'.join(theirs)}. Use an interpreter of the same "
            f"version. {instead}"
        )


def check_wrappers(wrappers: Any) -> tuple[Callable[[Any], Any], ...]:
    """``wrappers`` as ``gymnasium.make_vec`` takes them: a sequence of callables (``wrapper(env)``)."""
    items: Optional[list[Any]] = None
    if not isinstance(wrappers, (str, bytes)) and not callable(wrappers):
        try:
            items = list(wrappers)
        except TypeError:
            items = None
    if items is None or not all(callable(wrapper) for wrapper in items):
        raise TypeError(
            "wrappers must be a sequence of callables that each take an env and return it wrapped "
            f"(as gymnasium.make_vec's), got {wrappers!r}"[:300]
        )
    return tuple(items)


def ship_wrappers(wrappers: Sequence[Callable[[Any], Any]], run_dir: str) -> str:
    """Pickle ``wrappers`` into the run directory (a file named by its content, shared by every
    server of the same wrappers); returns its path, which the env servers load (``server/startup.py``)."""
    import hashlib

    import cloudpickle

    try:
        data = cloudpickle.dumps(list(wrappers))
    except Exception as exc:
        raise PortalError(
            f"the wrappers {list(wrappers)!r} cannot be pickled to ship them to the envs' runtime: "
            f"{type(exc).__name__}: {exc}"
        ) from exc
    path = os.path.join(run_dir, f"wrappers-{hashlib.sha256(data).hexdigest()[:16]}.pkl")
    if not os.path.exists(path):
        _write_private(path, data)
    return path


def check_options(context: Optional[str], worker: Optional[Callable[..., Any]], max_concurrency: Optional[int]) -> None:
    """Validate AsyncVectorEnv's worker-process options as gymnasium does, refusing what cannot apply."""
    if worker is not None:
        raise ValueError(
            "VectorPortal(worker=...) is not supported: there is no gymnasium worker loop to replace (env servers "
            "step their envs in place in shared memory). Change how an env steps or resets with a gymnasium "
            "Wrapper inside the env factory instead"
        )
    if context is not None and context not in multiprocessing.get_all_start_methods():
        raise ValueError(f"cannot find context for {context!r}")
    if max_concurrency is not None:
        if not isinstance(max_concurrency, int):
            raise ValueError(f"`max_concurrency` must be an integer or None, got {type(max_concurrency)}.")
        if max_concurrency < 1:
            raise ValueError(f"`max_concurrency` must be a positive or None, got {max_concurrency}.")


def envs_per_server(num_envs: int, requested: Optional[int], max_concurrency: Optional[int]) -> Optional[int]:
    """At most ``max_concurrency`` envs step at once: one env at a time per server, so the servers
    are capped (``contract/grouping.py`` decides)."""
    if max_concurrency is None:
        return requested
    return grouping.envs_per_server(num_envs, requested, max_concurrency=max_concurrency)


def ship_factories(specs: Sequence[EnvSpec], run_dir: str, server_index: int) -> dict[str, Any]:
    """Pickle one server's factories into the run directory; returns the server's env config."""
    import cloudpickle

    try:
        data = cloudpickle.dumps([spec.factory for spec in specs])
    except Exception as exc:
        raise PortalError(
            f"the env factory {specs[0].id} cannot be pickled to ship it to its runtime: {type(exc).__name__}: {exc}"
        ) from exc
    path = os.path.join(run_dir, f"factories-{server_index}.pkl")
    _write_private(path, data)
    config: dict[str, Any] = {
        "id": specs[0].id,
        "kwargs": {},
        "legacy": specs[0].legacy,
        "factories": path,
    }
    registry = _registrations(run_dir)
    if registry:
        config["registry"] = registry
    return config


def _write_private(path: str, data: bytes) -> None:
    """Write ``path`` anew (0600), replacing what an earlier start of the same server shipped.

    A server starts again when it is restarted or recycled. The bytes go into a new file of a
    random name (``mkstemp``: 0600, created, never opened through a link) that is renamed over
    ``path`` (a link there is replaced, not followed): a server starting meanwhile reads the
    old file or the new one, never a missing or partial one, and the run directory keeps one.
    """
    import tempfile

    fd, part = tempfile.mkstemp(prefix=f".{os.path.basename(path)}-", dir=os.path.dirname(path))
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.replace(part, path)
    except BaseException:
        if os.path.lexists(part):
            os.unlink(part)
        raise


def _registrations(run_dir: str) -> Optional[str]:
    """The agent's gymnasium registrations beyond gymnasium's own, pickled once per portal.

    AsyncVectorEnv's forked workers inherit every ``gym.register`` (``gym.register_envs(ale_py)``,
    an env registered in the script), so ``lambda: gym.make("ALE/Pong-v5")`` works there; the env
    server adds these specs to its registry (ids it already has are left alone) for the same effect.
    """
    path = os.path.join(run_dir, "registry.pkl")
    if os.path.exists(path):
        return path
    import cloudpickle
    import gymnasium

    extra = {
        env_id: spec
        for env_id, spec in gymnasium.envs.registry.items()
        if not (isinstance(spec.entry_point, str) and spec.entry_point.startswith("gymnasium."))
    }
    if not extra:
        return None
    try:
        data = cloudpickle.dumps(extra)
    except Exception as exc:
        logger.warn(
            f"VectorPortal: the agent's gymnasium registrations cannot be shipped to the env servers "
            f"({type(exc).__name__}: {exc}); factories calling gym.make see only the runtime's own"
        )
        return None
    _write_private(path, data)
    return path


def check_shared_memory(space: Any) -> None:
    """Refuse, with gymnasium's errors, the observation spaces AsyncVectorEnv cannot put in shared memory.

    VectorPortal could serve them (their values travel beside the ring), but ``shared_memory=True``
    is gymnasium's default, and code written for it expects these errors; ``shared_memory=False``
    serves them.
    """
    from gymnasium import spaces
    from gymnasium.vector.utils.shared_memory import create_shared_memory

    if isinstance(space, (spaces.Graph, spaces.Sequence)):
        raise TypeError(
            f"As {space} has a dynamic shape so its not possible to make a static shared memory. "
            "For `VectorPortal` (as for `AsyncVectorEnv`), pass `shared_memory=False`."
        )
    if isinstance(space, spaces.Dict):
        for sub in space.spaces.values():
            check_shared_memory(sub)
    elif isinstance(space, (spaces.Tuple, spaces.OneOf)):
        for sub in space.spaces:
            check_shared_memory(sub)
    elif create_shared_memory.dispatch(type(space)) is create_shared_memory.dispatch(object):
        raise ValueError(
            f"VectorPortal(..., shared_memory=True) cannot hold {space} in shared memory: it is a custom space "
            "without a fixed layout (AsyncVectorEnv refuses it too). Pass `shared_memory=False`: its values "
            "then travel beside the ring."
        ) from CustomSpaceError(f"Space of type `{type(space)}` has no registered `create_shared_memory` function")


def local_spaces(factory: EnvFactory) -> Optional[tuple[Any, Any]]:
    """Observation and action space of one env made in the agent, as AsyncVectorEnv always does.

    Only used for custom spaces that the env side cannot describe as data: the agent then has the
    real space objects (with their ``sample``, ``contains`` and type) instead of a RemoteSpace.
    None (with a warning) when the factory does not work in the agent, e.g. its packages exist only
    in the env's runtime.
    """
    try:
        env = factory()
    except Exception as exc:
        logger.warn(
            f"VectorPortal: the env factory does not run in the agent ({type(exc).__name__}: {exc}); "
            "its custom spaces are represented by RemoteSpace"
        )
        return None
    try:
        return env.observation_space, env.action_space
    finally:
        env.close()


def log_env_errors(errors: Sequence[EnvError]) -> None:
    """Log env errors as AsyncVectorEnv logs its workers' errors (which code and tests may watch)."""
    for error in errors:
        logger.error(f"Received the following error from Worker-{error.env_index} - Shutting it down")
        logger.error(f"{error.remote_traceback}")
    logger.error("Raising the last exception back to the main process.")
