"""What an env host (``portal-shm host``) offers the backends it runs for agents on other machines.

A backend an env host may run declares the options an agent may set (``Backend.agent_options``)
and builds itself from them (``Backend.for_agent``), asking a ``HostOffer`` for everything the
host's operator decides: interpreters, venvs and micromamba envs by name, container limits, images.
The host allow-lists the option names, then hands the values to ``for_agent`` and never builds a
backend by name itself, so a new backend touches ``runtimes/`` only. Every method of an offer
checks the agent's value against the operator's and raises ``HostPolicyError`` naming the flag of
``portal-shm host`` that would allow it; nothing an agent sent reaches a backend unchecked.
"""

from __future__ import annotations

from typing import Any, Optional, Protocol

ContainerLimits = tuple[int, Optional[float], int]  # bytes of memory, cpus or None, pids


class HostOffer(Protocol):
    """The operator's side of a hosted backend's options (``remote/host/runtime_offers.py``)."""

    def python(self, name: Any) -> Optional[str]:
        """The path of the interpreter the operator offers as ``name`` (None: the host's own)."""
        ...

    def venv(self, name: Any) -> dict[str, Any]:
        """The operator's venv ``name``, as ``VenvBackend`` fields (``requirements`` or
        ``requirements_file``)."""
        ...

    def requirements(self, requirements: Any) -> tuple[str, ...]:
        """Packages an agent names for a venv, where the operator lets agents install packages."""
        ...

    def micromamba(self, name: Any) -> str:
        """The spec file of the operator's micromamba env ``name``."""
        ...

    def container_limits(self, options: dict[str, Any], default_pids: Optional[int]) -> ContainerLimits:
        """The limits of an agent's container (``mem_limit``, ``cpus``, ``pids_limit`` of ``options``),
        within the operator's caps; ``default_pids`` is the runtime's own default."""
        ...

    def image(self, image: Any) -> str:
        """An image name an agent gave, checked: an image on the host that the operator allows."""
        ...
