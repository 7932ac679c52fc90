"""The versions of the packages a state depends on, read once per runtime (and ahead, by ``warm``)."""

from __future__ import annotations

import functools
import importlib.metadata
import sys
from typing import Any, Optional

from .adapters import ADAPTERS
from .pickled import PickledEnv
from .wrappers import _chain

_DISTRIBUTIONS = {"ale_py": "ale-py", "mujoco": "mujoco"}  # module -> distribution, where they differ


def _versions(chain: list, adapter: Any) -> dict:
    """The versions of the packages that define this env's behaviour: those of the classes of its
    chain (gymnasium or gym, ale_py ...), the adapter's and numpy's (arrays and generators), and
    Python's for the message. Not every installed package: a Pong state does not depend on
    ViZDoom being installed beside it."""
    modules = {type(link).__module__.partition(".")[0] for link in chain}
    return dict(_versions_of(frozenset(modules), adapter.packages))


@functools.lru_cache(maxsize=256)
def _versions_of(modules: frozenset, packages: tuple) -> tuple:
    """``_versions`` for the top-level modules of a chain's classes: the same every time a
    runtime asks (what it imported does not change under it)."""
    wanted = set(modules) | {"numpy"} | set(packages)
    out = {"python": "%d.%d" % sys.version_info[:2]}
    for module in sorted(wanted - {"portal_shm", "__main__", "builtins"}):
        name = _DISTRIBUTIONS.get(module, module)
        version = _installed_version(name)
        if version is not None:
            out[name] = version
    return tuple(out.items())


@functools.lru_cache(maxsize=None)
def _installed_version(name: str) -> Optional[str]:
    """A distribution's version, None for a module of none (a script's, an image's /opt/envs).
    Read once per process: parsing its metadata takes a millisecond, which a recycling swap pays
    in every state, and what a running runtime imported does not change under it."""
    try:
        return importlib.metadata.version(name)
    except (importlib.metadata.PackageNotFoundError, ValueError):
        return None


def warm(envs: list) -> None:
    """Read now what restoring a state into these envs reads of the runtime (their packages'
    versions): a spare standing by does, and a zygote before it forks, so that no swap pays it in
    its ``set_state`` (~9 ms in a fork). An env this module cannot describe is left to its restore."""
    for env in envs:
        try:
            chain = _chain(env)
            for adapter in [a for a in ADAPTERS if a.matches(chain[-1])] + [PickledEnv]:
                _versions(chain, adapter)
        except Exception:
            pass


def _describe(versions: dict) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(versions.items())) or "no known packages"
