"""The one promise every portal kind keeps: ``PortalVectorEnv``, what ``make_vec`` returns.

A local ``VectorPortal``, a ``RemoteVectorPortal`` (hosts elsewhere) and a ``RayVectorPortal``
(hosts Ray placed) are all this: gymnasium's ``VectorEnv`` with ``AsyncVectorEnv``'s async pairs
(``reset_async``/``reset_wait``, ``step_async``/``step_wait``, ``call_async``/``call_wait``, each
wait with a ``timeout``, gymnasium's errors for calls out of order), envpool's async batches
(``send``/``recv``/``async_reset``), ``call``/``get_attr``/``set_attr``/``render``, ``servers``
(where each env lives) and SyncVectorEnv's results. The blocking calls are their async pair, once,
here; each kind implements the pairs. ``tests/contract`` runs one suite over every kind.
"""

from __future__ import annotations

from abc import ABCMeta, abstractmethod
from typing import Any, Optional, Sequence

import numpy as np
from gymnasium.vector import VectorEnv

StepResult = tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]


class PortalVectorEnv(VectorEnv, metaclass=ABCMeta):
    """A gymnasium ``VectorEnv`` whose envs live in isolated runtimes (see the module docstring)."""

    def reset(
        self, *, seed: int | list[int | None] | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        """Reset all envs (lockstep; ``options["reset_mask"]`` for some), or every env and return the
        first batch (async batches)."""
        self.reset_async(seed=seed, options=options)
        return self.reset_wait()

    def step(self, actions: Any) -> StepResult:
        """Step every env once (lockstep), or ``send`` the last batch's envs and ``recv`` the next."""
        self.step_async(actions)
        return self.step_wait()

    def call(self, name: str, *args: Any, **kwargs: Any) -> tuple[Any, ...]:
        """Call ``name`` on every env (or read it, when it is not callable); one result per env."""
        self.call_async(name, *args, **kwargs)
        return self.call_wait()

    @abstractmethod
    def reset_async(
        self, seed: int | list[int | None] | None = None, options: dict[str, Any] | None = None
    ) -> None: ...

    @abstractmethod
    def reset_wait(self, timeout: Optional[float] = None) -> tuple[Any, dict[str, Any]]: ...

    @abstractmethod
    def step_async(self, actions: Any) -> None: ...

    @abstractmethod
    def step_wait(self, timeout: Optional[float] = None) -> StepResult: ...

    @abstractmethod
    def call_async(self, name: str, *args: Any, **kwargs: Any) -> None: ...

    @abstractmethod
    def call_wait(self, timeout: Optional[float] = None) -> tuple[Any, ...]: ...

    @abstractmethod
    def get_attr(self, name: str) -> tuple[Any, ...]: ...

    @abstractmethod
    def set_attr(self, name: str, values: list[Any] | tuple[Any, ...] | Any) -> None: ...

    @abstractmethod
    def render(self) -> tuple[Any, ...] | None: ...

    @abstractmethod
    def send(self, actions: Any, env_ids: Any = None) -> None:
        """Step ``env_ids`` (default: the last ``recv``'s) and return at once (async batches)."""

    @abstractmethod
    def recv(self, timeout: Optional[float] = None) -> StepResult:
        """The next ``batch_size`` envs to finish; ``infos["env_id"]`` says which (async batches)."""

    @abstractmethod
    def async_reset(self, seed: int | list[int | None] | None = None, options: dict[str, Any] | None = None) -> None:
        """Reset every env; ``recv()`` then hands out the reset batches (async batches)."""

    @abstractmethod
    def call_envs(self, env_ids: Any, name: str, *args: Any, **kwargs: Any) -> tuple[Any, ...]:
        """``call`` in the envs ``env_ids`` only (SB3's ``env_method(..., indices=)``): their results,
        in the order of ``env_ids``; the other envs are not touched."""

    @abstractmethod
    def get_attr_envs(self, env_ids: Any, name: str) -> tuple[Any, ...]:
        """``get_attr`` of the envs ``env_ids`` only, in their order."""

    @abstractmethod
    def set_attr_envs(self, env_ids: Any, name: str, values: list[Any] | tuple[Any, ...] | Any) -> None:
        """``set_attr`` in the envs ``env_ids`` only: one value for all, or one per env named."""

    @abstractmethod
    def get_state(self, env_ids: Any, allow_pickle: bool = False) -> list[bytes]:
        """Each env's state (opaque bytes, made in its runtime), restorable by ``set_state``."""

    @abstractmethod
    def set_state(self, states: Any, env_ids: Any, allow_pickle: bool = False) -> tuple[Any, dict[str, Any]]:
        """Restore states into envs (one each; one state into several: a fork): every env's observation."""

    @abstractmethod
    def record_frames(self, env_ids: Any, on: bool = True) -> None:
        """Turn frame capture on (or off) in the envs ``env_ids``: while on, each of their steps renders
        on its own server after the step and the frame rides in the env's info (``RecordVideo``
        takes it out again); the other envs never render. Needs ``render_mode="rgb_array"``."""

    @abstractmethod
    def stats(self, window: float = 10.0) -> dict[str, Any]:
        """Where the time goes over the last ``window`` seconds: rates, per-env step latency, per
        server load, the agent's time inside and away from the portal, and the verdict ``bound``."""

    #: Whether the envs' servers map this agent's memory (a local ring portal): then
    #: ``record_frames_shared`` hands each env a frame ring of its own.
    maps_agent_memory = False

    def record_frames_shared(self, env_ids: Sequence[int], rings: Sequence[Any], next_frames: Sequence[int]) -> None:
        """``record_frames(env_ids, True)`` with frames written into shared frame rings; only for
        portals whose servers map the agent's memory (``maps_agent_memory``)."""
        raise NotImplementedError(f"{type(self).__name__}'s servers do not map this agent's memory: use record_frames")

    @property
    @abstractmethod
    def servers(self) -> list[dict[str, Any]]:
        """Where each env lives: one dict per env server with ``server`` (its index), ``envs`` (the
        env indices it hosts), ``runtime`` (a description) and ``pid`` (on its host, where known)."""
