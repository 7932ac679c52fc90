"""Where a remote portal's env hosts are and how the agent reaches them: its ``Placement``.

The portal asks its placement for the hosts' addresses, each host's share of the envs, the CURVE
keys of a connection, and where to reconnect when a host was lost; it never reaches into how the
hosts came to be. ``FixedHosts`` are the hosts a user names (``RemoteBackend``: addresses, counts,
pinned keys); Ray's placement (``cluster/placement.py``) starts hosts on a cluster and replaces a
lost one on another node.
"""

from __future__ import annotations

import warnings
from typing import Optional, Protocol

from ...errors import PortalError
from .. import keys
from .backend import RemoteBackend

#: (this agent's public key, its secret key, the host's public key), as libzmq's CURVE takes them.
Curve = tuple[bytes, bytes, bytes]


class Placement(Protocol):
    """Where the hosts of one portal are (host ``index`` in env order)."""

    def addresses(self) -> list[str]: ...

    def env_counts(self, num_envs: int) -> list[int]: ...

    def curve(self, index: int) -> Optional[Curve]: ...

    def address_after_loss(self, index: int, address: str, deadline: float) -> str: ...

    def close(self) -> None: ...


class FixedHosts:
    """The hosts a user names: addresses, envs per host and pinned keys, from a ``RemoteBackend``."""

    def __init__(self, backend: RemoteBackend) -> None:
        self.backend = backend
        self._warned_insecure = False

    def addresses(self) -> list[str]:
        return self.backend.host_list()

    def env_counts(self, num_envs: int) -> list[int]:
        return self.backend.split(num_envs)

    def curve(self, index: int) -> Optional[Curve]:
        """This agent's key pair and host ``index``'s pinned key (None: insecure, warned once)."""
        b = self.backend
        if b.insecure:
            if not self._warned_insecure:  # once, not again at each reconnect
                self._warned_insecure = True
                warnings.warn(
                    "insecure=True: env traffic to the hosts is plain text and unauthenticated; use it only on a "
                    "network you trust (the hosts must run --insecure too)",
                    stacklevel=4,
                )
            return None
        if b.host_key is None:
            raise PortalError(
                "pin the hosts' public key: host_key='<40 Z85 characters>' or a path to the host's host.key "
                "(`portal-shm host` prints it at start); or run both sides insecure (host --insecure, insecure=True)"
            )
        host_keys = [b.host_key] if isinstance(b.host_key, (str, bytes)) else list(b.host_key)
        if len(host_keys) not in (1, len(b.host_list())):
            raise PortalError(f"host_key: give one key for all hosts or one per host ({len(b.host_list())})")
        server = keys.public_key(host_keys[index if len(host_keys) > 1 else 0], "host_key")
        path = b.client_key or keys.default_client_key()
        try:
            public, secret = keys.load_secret(path, "client_key")
        except PortalError as exc:
            raise PortalError(
                f"{exc}; create this agent's key pair with `portal-shm keys create` and give "
                "the hosts its public .key file (their clients directory)"
            ) from None
        return public, secret, server

    def address_after_loss(self, index: int, address: str, deadline: float) -> str:
        """A named host is reconnected where it was, once it is back."""
        return address

    def close(self) -> None:
        """Named hosts outlive the portal: nothing to stop."""
