"""The micromamba backend: env servers in a conda env built from a ``spec.yml``, cached by content.

For envs whose dependencies pip cannot provide (system libraries, old CUDA, a Python the machine
lacks): ``micromamba create -p <cache>/micromamba/<hash> -f spec.yml``, then an optional setup
script run inside the env (``micromamba run -p <prefix> bash setup.sh``, e.g. to pip-install a
package that needs the conda libraries), then the env side from its wheel (``portal-shm-env``)
with its dependencies, as for venvs. The spec must list ``python`` (3.9 or later, the wheel's
``Requires-Python``). Servers run under the env's python directly, without activation scripts;
use the setup script or ``PYTHONPATH``/env vars for what activation would set. Caching and locking are ``runtime_cache``'s, shared with venvs.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Optional

from .backend import Backend, ServerHandle, ServerLaunch
from .cache import (
    Build,
    RuntimeBuildError,
    RuntimeHandle,
    content_hash,
    ensure_runtime,
    file_digest,
)
from .env_wheel import env_wheel_digest
from .installers import install_env_side
from .process import ProcessBackend

if TYPE_CHECKING:
    from .hosting import HostOffer

KIND = "micromamba"
MISSING = (
    "the micromamba backend needs the `micromamba` executable, and there is none on PATH (nor in $MAMBA_EXE). "
    'Install it, e.g. `"${SHELL}" <(curl -L micro.mamba.pm/install.sh)` or '
    "`conda install -c conda-forge micromamba`, or download the static binary from "
    "https://mamba.readthedocs.io/en/latest/installation/micromamba-installation.html and put it on PATH; "
    'or use backend="venv" for requirements that pip can install'
)


def find_micromamba() -> str:
    """The micromamba executable: on PATH, else ``$MAMBA_EXE`` (set by ``micromamba shell init``)."""
    found = shutil.which("micromamba")
    exe = os.environ.get("MAMBA_EXE")
    if found is None and exe and os.path.isfile(exe) and os.access(exe, os.X_OK):
        found = exe
    if found is None:
        raise RuntimeBuildError(MISSING)
    return found


@dataclass(frozen=True)
class MicromambaBackend(Backend):
    """Runs env servers in a cached conda env made by micromamba from ``spec`` (an env ``.yml``).

    ``setup_script`` (bash) runs inside the new env once, after ``micromamba create``;
    ``cache_dir`` replaces ``$PORTAL_SHM_CACHE`` / ``~/.cache/portal-shm``.
    """

    spec: str
    setup_script: Optional[str] = None
    cache_dir: Optional[str] = None
    name = "micromamba"
    agent_options: ClassVar[Optional[tuple[str, ...]]] = ("micromamba",)  # an env the host defines, by name

    @classmethod
    def for_agent(cls, options: dict[str, Any], offer: HostOffer) -> Backend:
        return cls(spec=offer.micromamba(options.get("micromamba")))

    def __post_init__(self) -> None:
        for field in ("spec", "setup_script"):
            value = getattr(self, field)
            if value is not None:
                object.__setattr__(self, field, os.path.abspath(os.path.expanduser(str(value))))

    def forks_servers(self) -> bool:
        return True

    def trust_boundary(self) -> Optional[str]:
        return None  # the agent's user, the agent's env code

    def start(self, launch: ServerLaunch) -> ServerHandle:
        path = ensure_micromamba_env(self)
        handle = ProcessBackend(python=env_python(path)).start(launch)
        return RuntimeHandle(handle, f"micromamba env {os.path.basename(path)}")


def env_python(prefix: str) -> str:
    return os.path.join(prefix, "bin", "python")


def micromamba_hash(backend: MicromambaBackend) -> str:
    script = backend.setup_script
    return content_hash(
        {
            "kind": KIND,
            "spec": file_digest(backend.spec, "micromamba env spec"),
            "setup_script": file_digest(script, "setup script") if script else None,
            "env_side": env_wheel_digest(),
        }
    )


def ensure_micromamba_env(backend: MicromambaBackend) -> str:
    """The prefix of ``backend``'s env, built now if no agent built it before (safe to race)."""
    digest = micromamba_hash(backend)  # reads the spec first: a missing spec is the first error
    micromamba = find_micromamba()

    def build(b: Build) -> dict:
        b.step(f"micromamba create -f {os.path.basename(backend.spec)}")
        b.run([micromamba, "create", "-y", "-p", b.path, "-f", backend.spec], "creating the env with micromamba")
        python = env_python(b.path)
        if not os.path.exists(python):
            raise RuntimeBuildError(
                f"the env made from {backend.spec} has no {python}: "
                "list python (3.9 or later) among the spec's dependencies"
            )
        if backend.setup_script:
            b.step(f"running {os.path.basename(backend.setup_script)} inside the env")
            b.run(
                [micromamba, "run", "-p", b.path, "bash", backend.setup_script],
                "the setup script",
                cwd=os.path.dirname(backend.setup_script),
            )
        return {**install_env_side(b, python, [], "the env side"), "micromamba": micromamba}

    facts = {"spec": backend.spec, "setup_script": backend.setup_script}
    return ensure_runtime(KIND, digest, facts, build, backend.cache_dir)
