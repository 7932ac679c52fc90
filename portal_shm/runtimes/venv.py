"""The venv backend: env servers in a virtualenv built from a requirements list, cached by content.

The point is dependency isolation without Docker: an agent on numpy 2 and gymnasium 1 can step
an env that needs ``numpy<2`` and legacy ``gym``, because the env's server runs under the venv's
interpreter, which sees only the venv's packages. The venv gets the requirements and the env side
from its wheel (``portal-shm-env``, made from the agent's own files by ``env_wheel``) with its
dependencies (numpy, pyzmq, msgpack; the requirements decide their versions), never the agent's
site-packages.

The venv is built on first use (uv when available, else ``python -m venv`` and pip) into
``~/.cache/portal-shm/venvs/<hash>`` and reused by every later portal with the same requirements,
base interpreter and env-side wheel (``env_wheel_digest``); see ``runtime_cache`` for the locking.
The hash covers the requirement strings (and the requirements file's text), not what they point
to: an unpinned name, a local path or a file included with ``-r`` is installed as it was when the
venv was built (``portal-shm env rm HASH`` makes the next portal rebuild it). Servers then start
exactly as on the process backend: they inherit the agent's environment variables and working
directory, and look up named envs and factories' modules in the agent's own folders first (its
script's, the working directory, ``PYTHONPATH``), never in its site-packages
(``runtimes/import_path.py``).
"""

from __future__ import annotations

import os
import shutil
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Optional, Union

from ..errors import HostPolicyError, PortalError
from .backend import Backend, ServerHandle, ServerLaunch
from .cache import (
    ALL,
    Build,
    RuntimeBuildError,
    RuntimeHandle,
    content_hash,
    ensure_runtime,
    file_digest,
    list_runtimes,
    python_version,
    remove_runtimes,
)
from .env_wheel import env_wheel_digest
from .installers import create_venv, install_env_side
from .process import ProcessBackend

if TYPE_CHECKING:
    from .hosting import HostOffer

__all__ = ["VenvBackend", "RuntimeBuildError", "ensure_venv", "venv_hash", "venv_python", "list_venvs", "remove_venv"]

KIND = "venv"


@dataclass(frozen=True)
class VenvBackend(Backend):
    """Runs env servers in a cached venv with ``requirements`` (and ``-r requirements_file``).

    ``python`` is the base interpreter of the venv (default: the agent's); ``cache_dir`` replaces
    ``$PORTAL_SHM_CACHE`` / ``~/.cache/portal-shm``. A failed build raises ``RuntimeBuildError``
    with the installer's command and the end of its output.
    """

    requirements: tuple = ()
    requirements_file: Optional[str] = None
    python: Optional[str] = None
    cache_dir: Optional[str] = None
    name = "venv"
    agent_options: ClassVar[Optional[tuple[str, ...]]] = ("venv", "requirements", "python")

    @classmethod
    def for_agent(cls, options: dict[str, Any], offer: HostOffer) -> Backend:
        """A venv the host defines (``venv=NAME``), or one of the packages an agent names where the
        operator lets agents install (``requirements=[...]``)."""
        python = offer.python(options.get("python"))
        if "venv" in options:
            if "requirements" in options:
                raise HostPolicyError("give venv=NAME or requirements=[...], not both")
            return cls(python=python, **offer.venv(options["venv"]))
        return cls(requirements=offer.requirements(options.get("requirements", ())), python=python)

    def __post_init__(self) -> None:
        requirements = (self.requirements,) if isinstance(self.requirements, str) else self.requirements
        object.__setattr__(self, "requirements", tuple(str(r).strip() for r in requirements or ()))
        if self.requirements_file is not None:
            object.__setattr__(self, "requirements_file", os.path.abspath(os.path.expanduser(self.requirements_file)))

    def base_python(self) -> str:
        if self.python is None:
            return sys.executable
        found = shutil.which(self.python)
        if found is None:
            raise PortalError(f"base interpreter {self.python!r} for the venv backend not found")
        return os.path.abspath(found)

    def forks_servers(self) -> bool:
        return True

    def trust_boundary(self) -> Optional[str]:
        return None  # the agent's user, the agent's env code

    def start(self, launch: ServerLaunch) -> ServerHandle:
        path = ensure_venv(self)
        handle = ProcessBackend(python=venv_python(path)).start(launch)
        return RuntimeHandle(handle, f"venv {os.path.basename(path)}")


def _facts(backend: VenvBackend) -> dict:
    """What decides the venv's contents, as stored in its marker (and hashed, with the file contents)."""
    base = backend.base_python()
    return {
        "python": base,
        "python_version": python_version(base),
        "requirements": sorted(backend.requirements),
        "requirements_file": backend.requirements_file,
    }


def venv_hash(backend: VenvBackend) -> str:
    facts = _facts(backend)
    requirements_file = backend.requirements_file
    contents = file_digest(requirements_file, "requirements file") if requirements_file else None
    return content_hash({**facts, "kind": KIND, "requirements_file": contents, "env_side": env_wheel_digest()})


def venv_python(path: str) -> str:
    return os.path.join(path, "bin", "python")


def ensure_venv(backend: VenvBackend) -> str:
    """The path of ``backend``'s venv, built now if no agent built it before (safe to race)."""
    facts = _facts(backend)

    def build(b: Build) -> dict:
        create_venv(b, facts["python"])
        python = venv_python(b.path)
        args = list(backend.requirements)
        if backend.requirements_file:
            args += ["-r", backend.requirements_file]
        summary = (
            " ".join(backend.requirements + ((f"-r {backend.requirements_file}",) if backend.requirements_file else ()))
            or "the env side"
        )
        return install_env_side(b, python, args, summary)

    return ensure_runtime(KIND, venv_hash(backend), facts, build, backend.cache_dir)


def list_venvs(cache_dir: Optional[str] = None) -> list[dict]:
    """Cached venvs, oldest first: ``hash``, ``path``, ``requirements``, ``size`` (bytes), ``created``
    (epoch seconds), ``python``, ``complete`` (False while being built or after a crash)."""
    return list_runtimes(KIND, cache_dir)


def remove_venv(hash_or_all: Union[str, bool], cache_dir: Optional[str] = None) -> list[dict]:
    """Remove the venv whose hash starts with ``hash_or_all``, or all of them for ``"all"``/True."""
    which = ALL if hash_or_all is True or hash_or_all == ALL else str(hash_or_all)
    return remove_runtimes(which, KIND, cache_dir)
