"""A session's envs: the local VectorPortal the host's policy grants its hello, and the layout of
their arrays on the wire (actions in, results out, by the spaces' schemas).

What the agent asked for decides how the session steps them (lockstep, async batches, a whole
host per batch) and what the welcome tells it; the rest of the session (its thread, the router's
fast path, the numbering of its messages) only asks these for it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Optional

import numpy as np

from ...agent.local.spec import EnvSpec
from ...agent.vector import VectorPortal
from ...wire import trees
from ...wire.protocol import packb
from ...wire.schema import is_fixed, space_to_schema
from .. import frames
from ..infos import crossing, unbatch
from ..messages import RESULT, WELCOME
from .policy import HostPolicy


@dataclass(frozen=True)
class AgentModes:
    """How the agent asked its envs to be stepped, as far as the session must know it."""

    whole: bool  # async batches of the agent, each all of this host's envs
    recycling: bool
    lossy_infos: bool  # the agent asked for infos="lossy" (``infos.crossing``)


def open_portal(
    hello: dict[str, Any], num_envs: int, policy: HostPolicy, step_timeout: float
) -> tuple[VectorPortal, AgentModes]:
    """The envs the policy grants the hello (``HostPolicyError`` where it refuses them), started."""
    grant = policy.grant(hello, num_envs)
    vector = dict(grant.vector)
    # The agent's batches come from one host each: a host with no more envs than a batch
    # steps them all at once (lockstep here) and hands each step out as one batch.
    whole = bool(vector.get("batch_size")) and vector["batch_size"] >= num_envs
    modes = AgentModes(whole, vector.get("recycle") is not None, vector.get("infos") == "lossy")
    if whole:
        vector.pop("batch_size")
    # Every wait of the session's thread is bounded: an agent may ask for less than the host's.
    asked = vector.get("step_timeout")
    vector["step_timeout"] = step_timeout if asked is None else min(asked, step_timeout)
    spec = EnvSpec(grant.env_id, grant.env_kwargs, grant.backend)
    # No spinning: the router thread, the zmq I/O thread and the agent's traffic need the
    # cores a spinning agent or server would take, and a step here waits for a network anyway.
    return VectorPortal([spec] * num_envs, copy=False, spin_wait=0.0, **vector), modes


class SessionEnvs:
    """A started session's envs, how the agent steps them, and their arrays' layout on the wire."""

    def __init__(self, portal: VectorPortal, modes: AgentModes) -> None:
        _no_wakeup_preemption(portal)
        self.portal = portal
        self.whole = modes.whole
        self.recycling = modes.recycling
        self.lossy_infos = modes.lossy_infos
        self.batched = portal.batch_size is not None and portal.batch_size < portal.num_envs
        self.obs_schema = space_to_schema(portal.single_observation_space)
        self.obs_fixed = is_fixed(self.obs_schema)
        self.act_schema = space_to_schema(portal.single_action_space)
        self.act_fixed = is_fixed(self.act_schema)
        self._act_specs = trees.leaf_specs(self.act_schema) if self.act_fixed else []

    def welcome(self, runtime: str, codec: str, host_name: str) -> dict[str, Any]:
        """The welcome's header: what the agent got (its servers named by runtime kind only)."""
        portal = self.portal
        return {
            "cmd": WELCOME,
            "re": 1,
            "obs_schema": self.obs_schema,
            "act_schema": self.act_schema,
            "render_mode": portal.render_mode,
            "metadata": _packable({k: v for k, v in portal.metadata.items() if k != "autoreset_mode"}),
            "codec": codec,
            "batched": self.batched,
            "servers": [f"{runtime} server {i}" for i in range(len(portal.servers))],
            "server_envs": [s["envs"] for s in portal.servers],
            "server_hosting": [s.get("hosting") for s in portal.servers],  # (what steps each one's envs)
            "host": host_name,
        }

    def actions(self, header: dict[str, Any], arrays: list[Any], count: int) -> Any:
        """A request's actions for ``count`` envs: its frames checked against the action space."""
        if not self.act_fixed:
            return header["actions"]
        specs = self._act_specs
        if len(arrays) != len(specs):
            raise frames.FrameError(f"{len(arrays)} action arrays for {len(specs)} leaves of the action space")
        checked = [frames.expect(a, dtype, (count,) + shape, "actions") for a, (shape, dtype) in zip(arrays, specs)]
        return trees.unflatten(checked, self.act_schema)

    def result(
        self, seq: Optional[int], obs: Any, flags: Any, infos: dict[str, Any], count: int, env_ids: Any = None
    ) -> tuple[dict[str, Any], list[Any], int]:
        """A reset's or step's reply (header, arrays, how many of them may be compressed); an
        ``InfoEncodingError`` where an info cannot reach the agent as it is."""
        phase = "step" if flags is not None else "reset"
        sparse = crossing(unbatch(infos, count), self.lossy_infos, phase, env_ids)
        header: dict[str, Any] = {"cmd": RESULT if env_ids is None else "batch", "infos": sparse}
        if seq is not None:
            header["re"] = seq
        if env_ids is not None:
            header["env_ids"] = [int(i) for i in env_ids]
        arrays = trees.flatten(obs, self.obs_schema) if self.obs_fixed else []
        if not self.obs_fixed:
            header["obs"] = obs
        compressible = len(arrays)
        if flags is not None:
            arrays += [np.asarray(flags[0], np.float64), np.asarray(flags[1], np.bool_), np.asarray(flags[2], np.bool_)]
        return header, arrays, compressible


def _packable(mapping: dict[str, Any]) -> dict[str, Any]:
    """The entries of an env's metadata that can cross the wire (the rest stays on the host)."""
    out = {}
    for key, value in mapping.items():
        try:
            packb(value)
        except Exception:
            continue
        out[str(key)] = value
    return out


def _no_wakeup_preemption(portal: VectorPortal) -> None:
    """Put the envs' servers in ``SCHED_BATCH`` (Linux): same share of the cores, but a woken
    server no longer preempts the task that woke it.

    The router wakes a lockstep step's servers one after the other, each by a pipe write; a woken
    server used to take the router's core at once, so the next server was rung only when the router
    ran again, and the step waited for that straggler (README "Envs on another machine" has the
    figures). Where the policy cannot be set (other systems, a container's process not ours) the
    servers keep the default.
    """
    setter = getattr(os, "sched_setscheduler", None)
    if setter is None:
        return
    for server in portal.servers:
        try:
            setter(server["pid"], os.SCHED_BATCH, os.sched_param(0))
        except (OSError, TypeError):
            pass
