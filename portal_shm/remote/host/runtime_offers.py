"""The operator's side of the runtimes an env host runs for agents: a ``HostOffer`` (``runtimes/hosting.py``).

A hosted backend builds itself from an agent's options (``Backend.for_agent``) and asks this offer
for everything that is the operator's to decide: an interpreter, a venv or a micromamba env an
agent picks by name (never by path), packages an agent may name for a venv, a container's limits
within the operator's caps, an image. Each answer is checked against the operator's values; a
refusal is a ``HostPolicyError`` naming the ``portal-shm host`` flag that would allow it.
"""

from __future__ import annotations

import fnmatch
import os
import re
from dataclasses import dataclass, field
from typing import Any, Optional

from ...errors import HostPolicyError, PortalError
from ...runtimes.docker import LABEL_ENV_IMAGE
from ...runtimes.hosting import ContainerLimits

_IMAGE = re.compile(r"[a-z0-9][a-z0-9._/-]{0,199}(:[\w][\w.-]{0,127})?")
_REMOTE_URLS = ("https://", "http://", "git+https://")
_BYTES = re.compile(r"(\d+(?:\.\d+)?)\s*([bkmg]?)b?", re.IGNORECASE)
_UNITS = {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
MIN_MEMORY = 6 << 20  # Docker refuses less; 0 would mean no limit
MIN_CPUS = 0.01  # Docker's least; fewer nano-CPUs round to 0, no limit
MAX_REQUIREMENTS = 100


def parse_bytes(value: Any, what: str) -> int:
    """Docker's memory sizes: an int of bytes, or ``"512m"``, ``"4g"``."""
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    found = _BYTES.fullmatch(value.strip()) if isinstance(value, str) else None
    if not found or float(found.group(1)) <= 0:
        raise HostPolicyError(f"{what} {value!r} is not a memory size: give bytes or a size such as '512m' or '4g'")
    return int(float(found.group(1)) * _UNITS[found.group(2).lower()])


def flag(patterns: Optional[tuple[Any, ...]]) -> str:
    """Patterns as a flag of ``portal-shm host`` takes them."""
    return ",".join(patterns) if patterns else "(none)"


@dataclass(frozen=True)
class RuntimeOffers:
    """What the operator offers hosted runtimes; each field is the ``HostPolicy`` field (and flag)
    of the same name."""

    pythons: dict[str, Any] = field(default_factory=dict[str, Any])
    venvs: dict[str, Any] = field(default_factory=dict[str, Any])
    micromambas: dict[str, Any] = field(default_factory=dict[str, Any])
    agent_installs: bool = False
    images: Optional[tuple[Any, ...]] = None
    max_mem: str = "4g"
    max_cpus: Optional[float] = None
    max_pids: int = 1024

    def check(self) -> None:
        """The operator's own values (a bad flag stops the host)."""
        try:
            parse_bytes(self.max_mem, "--max-mem")
        except HostPolicyError as exc:
            raise PortalError(str(exc)) from None
        for name, path in self.pythons.items():
            if not os.path.isfile(path) or not os.access(path, os.X_OK):
                raise PortalError(f"--python {name}={path}: there is no executable file at {path}")
        for name, spec in self.micromambas.items():
            if not os.path.isfile(spec):
                raise PortalError(f"--micromamba {name}={spec}: there is no spec file at {spec}")

    def describe_images(self) -> str:
        return flag(self.images) if self.images is not None else f"images labelled {LABEL_ENV_IMAGE}"

    # -- named by the operator ---------------------------------------------------------------------
    def python(self, name: Any) -> Optional[str]:
        if name is None:
            return None
        if not isinstance(name, str) or name not in self.pythons:
            offered = ", ".join(sorted(self.pythons)) or "none"
            raise HostPolicyError(
                f"python={str(name)[:200]!r}: agents pick an interpreter the host offers by name, never a path; "
                f"this host offers {offered} (portal-shm host --python NAME=PATH)"
            )
        return str(self.pythons[name])

    def venv(self, name: Any) -> dict[str, Any]:
        if not isinstance(name, str) or name not in self.venvs:
            offered = ", ".join(sorted(self.venvs)) or "none"
            raise HostPolicyError(
                f"venv={str(name)[:100]!r} is not one this host defines; it offers {offered} "
                "(portal-shm host --venv NAME='REQUIREMENT ...')"
            )
        spec = self.venvs[name]
        if isinstance(spec, str) and spec.startswith("@"):
            return {"requirements_file": spec[1:]}
        return {"requirements": tuple(spec.split()) if isinstance(spec, str) else tuple(spec)}

    def micromamba(self, name: Any) -> str:
        if not isinstance(name, str) or name not in self.micromambas:
            offered = ", ".join(sorted(self.micromambas)) or "none"
            raise HostPolicyError(
                f"micromamba={str(name)[:100]!r}: agents pick a micromamba env the host defines by name; it offers "
                f"{offered} (portal-shm host --micromamba NAME=SPEC.yml)"
            )
        return str(self.micromambas[name])

    # -- named by the agent --------------------------------------------------------------------------
    def requirements(self, requirements: Any) -> tuple[str, ...]:
        """Packages (names, version specifiers, URLs), never installer options or paths on the host;
        only where the operator allows agents to install (``--agent-installs``)."""
        if not self.agent_installs:
            raise HostPolicyError(
                "this host builds only the venvs its operator defined (venv=NAME; portal-shm host --venv NAME=...): "
                "installing packages an agent names runs their code here, which the operator allows with "
                "--agent-installs"
            )
        if isinstance(requirements, str):
            requirements = [requirements]
        if not isinstance(requirements, (list, tuple)) or len(requirements) > MAX_REQUIREMENTS:
            raise HostPolicyError(f"requirements must be a list of at most {MAX_REQUIREMENTS} requirement strings")
        for requirement in requirements:
            if (
                not isinstance(requirement, str)
                or not requirement.strip()
                or len(requirement) > 300
                or requirement.strip()[0] in "-./~"
                or "file:" in requirement
                or ("@" in requirement and not requirement.partition("@")[2].strip().startswith(_REMOTE_URLS))
                or "\n" in requirement
            ):
                raise HostPolicyError(
                    f"requirement {str(requirement)[:300]!r}: agents name packages (name, version specifiers, "
                    "URLs), never installer options (-r, -e, --index-url) or paths on the host"
                )
        return tuple(r.strip() for r in requirements)

    def container_limits(self, options: dict[str, Any], default_pids: Optional[int]) -> ContainerLimits:
        """What the agent asked for within the host's caps, the caps where it asked for nothing
        (None included); ``default_pids`` is the runtime's own default, capped too."""
        cap = parse_bytes(self.max_mem, "--max-mem")
        asked = options.get("mem_limit")
        memory = cap if asked is None else parse_bytes(asked, "mem_limit")
        if not MIN_MEMORY <= memory <= cap:
            raise HostPolicyError(
                f"mem_limit {asked!r}: give at least 6m (Docker's least) and at most this host's cap {self.max_mem} "
                "(--max-mem)"
            )
        top_cpus = self.max_cpus or float(os.cpu_count() or 1)
        cpus = options.get("cpus")
        if cpus is None:
            cpus = self.max_cpus
        elif isinstance(cpus, bool) or not isinstance(cpus, (int, float)) or not MIN_CPUS <= cpus <= top_cpus:
            raise HostPolicyError(f"cpus={cpus!r}: give a number from {MIN_CPUS} to {top_cpus:g} (--max-cpus)")
        pids = options.get("pids_limit")
        if pids is None:
            pids = min(default_pids or self.max_pids, self.max_pids)
        elif isinstance(pids, bool) or not isinstance(pids, int) or not 0 < pids <= self.max_pids:
            raise HostPolicyError(f"pids_limit={pids!r}: give an integer from 1 to {self.max_pids} (--max-pids)")
        return memory, cpus, pids

    def image(self, image: Any) -> str:
        """An image name, on this host, that the operator allows: by pattern, or by the env-image label."""
        if not isinstance(image, str) or not _IMAGE.fullmatch(image):
            raise HostPolicyError(f"image {str(image)[:200]!r} is not an image name (repository[:tag])")
        from ...runtimes.docker import docker_client

        try:
            found = docker_client().images.get(image)
        except Exception:
            raise HostPolicyError(
                f"image {image!r} is not on this host: build it there first (portal-shm build ...); hosts never "
                "pull images an agent names"
            ) from None
        if self.images is not None:
            names = [image] + list(found.tags or [])
            if not any(fnmatch.fnmatchcase(n, p) for n in names for p in self.images):
                raise HostPolicyError(
                    f"image {image!r} is not allowed on this host: it runs images matching {flag(self.images)} "
                    "(portal-shm host --images PATTERNS)"
                )
        elif LABEL_ENV_IMAGE not in (found.labels or {}):
            raise HostPolicyError(
                f"image {image!r} is not a portal-shm env image (no {LABEL_ENV_IMAGE} label, which portal-shm build "
                "sets); the operator allows other images with portal-shm host --images PATTERNS"
            )
        return image
