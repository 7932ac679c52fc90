"""Servers whose envs one native vector env steps: a batched implementation an env family ships
(ALE's ``AtariVectorEnv`` today, ``native_ale.py``) hosting all of a server's envs.

A *batched* entry point (marked with ``batched``) is called once per server with ``num_envs``, not
once per env. It returns a ``NativeBatch``, or plain envs (a list of ``num_envs``) where the family's
batched implementation is missing or cannot express the options: then the server steps them one
by one as any other, which is the fallback old runtimes keep. The server steps a batch with one
call per command (``native_stepper.NativeStepper``) and resets it with one call; the rest of the server
sees its envs through ``BatchMember`` stand-ins (spaces, metadata, attributes, close).

Python 3.9 syntax, numpy only: this runs in env runtimes.
"""

from __future__ import annotations

import inspect
from typing import Any, Callable, List, Optional, Sequence, Tuple

import numpy as np

BATCHED_ATTRIBUTE = "portal_shm_batched"
SHARING_ATTRIBUTE = "portal_shm_sharing"  # it takes ``num_servers`` (``make_batched``)
SERVER_GIVEN = ("num_envs", "num_servers")  # what a batched entry point gets from its server, not its agent


def batched(factory: Optional[Callable[..., Any]] = None, *, per_env: Optional[Callable[..., Any]] = None) -> Any:
    """Mark an entry point as making all of a server's envs in one call: ``factory(num_envs=k, **kwargs)``,
    and ``num_servers=s`` where it takes it (the env servers of its portal on this machine, which
    share its cores).

    ``per_env``: the per-env entry point whose keyword arguments the factory's ``**options`` are.
    The factory's signature then shows what an agent passes it (``agent_signature``): env hosts
    check an agent's env kwargs against it."""

    def mark(entry: Callable[..., Any]) -> Callable[..., Any]:
        setattr(entry, BATCHED_ATTRIBUTE, True)
        setattr(entry, SHARING_ATTRIBUTE, "num_servers" in inspect.signature(entry).parameters)
        entry.__signature__ = agent_signature(entry, per_env)  # type: ignore[attr-defined]
        return entry

    return mark if factory is None else mark(factory)


def agent_signature(factory: Callable[..., Any], per_env: Optional[Callable[..., Any]] = None) -> inspect.Signature:
    """A batched entry point's parameters as an agent passes them: less ``num_envs`` and ``num_servers``
    (its server's to give), and with ``per_env``'s keyword parameters and ``**kwargs`` in place of its
    own ``**options``."""
    own = [p for p in inspect.signature(factory).parameters.values() if p.name not in SERVER_GIVEN]
    if per_env is None:
        return inspect.Signature(own)
    kept = [p for p in own if p.kind is not p.VAR_KEYWORD]
    names = {p.name for p in kept}
    forwarded = [
        p
        for p in inspect.signature(per_env).parameters.values()
        if p.kind in (p.KEYWORD_ONLY, p.VAR_KEYWORD) and p.name not in names
    ]
    return inspect.Signature(kept + forwarded)


def is_batched(factory: Any) -> bool:
    return getattr(factory, BATCHED_ATTRIBUTE, False) is True


class NativeBatch:
    """``num_envs`` envs stepped together by one native call. Subclasses fill in the spaces and
    the four methods; ``name`` says in ``stats()`` what steps the envs (e.g. ``ale_py.AtariVectorEnv``).

    A step's observations, rewards and flags are arrays of ``num_envs``; its infos one list per env
    as the server sends a plain env's: ``[info]``, or at a SAME_STEP episode end
    ``[{"final_obs": ..., "final_info": ...}, reset_info]``; or ``Columns`` (cheaper to send).
    """

    name = "native"
    num_envs: int
    single_observation_space: Any
    single_action_space: Any
    metadata: dict = {}
    _listener: Optional[Callable[[], None]] = None  # its server's (``listen``)

    def configure(self, autoreset_mode: str) -> None:
        """The autoreset mode the agent attached with ("NextStep", "SameStep" or "Disabled"), before
        the first reset. Disabled: the server refuses to step an env whose episode ended."""

    def reset(self, indices: np.ndarray, seeds: Sequence[Optional[int]]) -> Tuple[np.ndarray, List[dict]]:
        """Reset the envs ``indices`` (seeded where a seed is not None); every env's observation and
        the infos of those reset."""
        raise NotImplementedError

    def step(self, actions: np.ndarray) -> Tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, Any]:
        """One step of every env: observations, rewards, terminated, truncated, infos. Call
        ``stepped()`` as soon as the native call returns, before the results are made up."""
        raise NotImplementedError

    def stepped(self) -> None:
        """The native call of a step returned: its server may ring its agent now (``listen``)."""
        if self._listener is not None:
            self._listener()

    def listen(self, stepped: Callable[[], None]) -> None:
        """Call ``stepped`` whenever ``stepped()`` is: the server that steps this batch, which may
        ring its agent before it writes the results (``native_stepper.EarlyRing``)."""
        self._listener = stepped

    def close(self) -> None:
        """Release the native env (called once, when the server closes its envs)."""


class Columns(dict):
    """A native batch's infos as columns: key -> one value per env (ints, floats, bools), the same
    keys for every env; ``extras`` holds env position -> info dicts of that env alone (a SAME_STEP
    episode end's ``final_obs``/``final_info``). An agent that reads columns gets them as one blob
    for the server's envs; others get ``per_env()``, the lists a plain env's server sends."""

    def __init__(self, columns: dict, extras: Optional[dict] = None) -> None:
        super().__init__(columns)
        self.extras = extras or {}

    def per_env(self, count: int) -> List[list]:
        rows: List[list] = [list(self.extras.get(j, [])) for j in range(count)]
        for j in range(count):
            rows[j].append({key: values[j] for key, values in self.items()})
        return rows


class BatchMember:
    """One env of a ``NativeBatch`` as the rest of the server sees it: its spaces, metadata and the
    batch's attributes. It is never stepped or reset alone (the server calls the batch); what only
    a single env can do (render, state) is refused with what to use instead."""

    def __init__(self, batch: NativeBatch, index: int) -> None:
        self.batch = batch
        self.index = index
        self.observation_space = batch.single_observation_space
        self.action_space = batch.single_action_space
        self.metadata = dict(batch.metadata or {})
        self.render_mode = None
        self.spec = None
        self.closed = False

    @property
    def unwrapped(self) -> "BatchMember":
        return self

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self.batch, name)

    def refuse(self, what: str) -> Exception:
        return RuntimeError(
            f"{what} of one env is not available: env servers of {self.batch.name} step their envs together "
            "in it, which keeps no per-env copy of it; make the envs with the per-env entry point "
            "(portal_shm.presets:atari) where you need it"
        )

    def step(self, action: Any) -> Any:
        raise self.refuse("a step")

    def reset(self, **kwargs: Any) -> Any:
        raise self.refuse("a reset")

    def render(self) -> Any:
        raise self.refuse("a rendered frame")

    def get_state(self) -> Any:
        raise self.refuse("the state")

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            if self.index == 0:
                self.batch.close()


def members(batch: NativeBatch) -> list:
    return [BatchMember(batch, j) for j in range(batch.num_envs)]


def batch_of(envs: list) -> Optional[NativeBatch]:
    """The native batch behind a server's envs, or None for plain envs."""
    return envs[0].batch if envs and isinstance(envs[0], BatchMember) else None


def hosting(envs: list) -> str:
    """What steps a server's envs, as ``stats()`` names it: the batch's name, else ``per-env`` (and
    why, where a batched entry point fell back to it)."""
    batch = batch_of(envs)
    if batch is not None:
        return batch.name
    reason = getattr(envs, "reason", None)
    return f"per-env ({reason})" if reason else "per-env"


class PerEnv(list):
    """What a batched entry point returns where its family's native vector env cannot host the envs
    here: the envs made one by one, and why (shown by ``stats()``)."""

    def __init__(self, envs: list, reason: str) -> None:
        super().__init__(envs)
        self.reason = reason


def make_batched(factory: Callable[..., Any], count: int, kwargs: dict, servers: Optional[int] = None) -> list:
    """A server's ``count`` envs from a batched entry point: a native batch's members, or its envs.
    ``servers``: the env servers of the portal on this machine (with this one), where known."""
    for name in SERVER_GIVEN:
        if name in kwargs:
            raise TypeError(
                f"env_kwargs name {name}, which a batched entry point ({factory!r}) gets from its env server: "
                "the portal's num_envs and envs_per_server set it"
            )
    if getattr(factory, SHARING_ATTRIBUTE, False) and isinstance(servers, int) and servers > 0:
        kwargs = dict(kwargs, num_servers=servers)
    made = factory(num_envs=count, **kwargs)
    if isinstance(made, NativeBatch):
        if made.num_envs != count:
            raise ValueError(f"{factory!r} made a batch of {made.num_envs} envs for a server of {count}")
        return members(made)
    if not isinstance(made, list) or len(made) != count:
        raise TypeError(
            f"the batched entry point {factory!r} must return a NativeBatch or a list of {count} envs, "
            f"got {type(made).__name__}"
        )
    return made
