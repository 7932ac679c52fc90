"""Lockstep over hosts: one message per host per step or reset, every host's reply joined in env order.

Each host steps its share of the envs in its own local portal and answers with the batch's arrays
as frames; a host restarted in NextStep mode is not asked once (its stand-in answers: the fresh
envs' reset), and a masked reset asks only the hosts with envs to reset (the others keep their
observations, as gymnasium's envs do). N envs behind a round trip RTT step at most
N / (RTT + N / X0) times per second, for a host that steps X0 envs/s locally.
"""

from __future__ import annotations

from typing import Any, Optional

import numpy as np

from ..messages import RESET, SET_STATE, STEP
from .exchange import Exchange, Posted
from .host_arrays import HostArrays, Reply
from .hosts import Hosts
from .recovery import HostRecovery

Step = tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]


class RemoteLockstep:
    """Steps, resets and restores every env of a remote portal together."""

    def __init__(self, hosts: Hosts, exchange: Exchange, arrays: HostArrays, recovery: HostRecovery, num_envs: int):
        self.hosts = hosts
        self.exchange = exchange
        self.arrays = arrays
        self.recovery = recovery
        self.num_envs = num_envs
        self.posted: Optional[Posted] = None  # the step or reset in flight
        self.showing: dict[int, BaseException] = {}  # hosts restarted in a call whose restart this reset shows

    def reset(self, seeds: list[Any], options: Optional[dict[str, Any]], mask: Optional[np.ndarray]) -> None:
        self.posted = self.post_reset(seeds, options, mask)

    def post_reset(self, seeds: list[Any], options: Optional[dict[str, Any]], mask: Optional[np.ndarray]) -> Posted:
        """Send each host its envs' reset (with ``mask``: the hosts with envs to reset only)."""
        if mask is not None:
            options = {**(options or {}), "reset_mask": mask}
        self.recovery.note_reset(seeds, options)
        headers: list[Optional[dict[str, Any]]] = []
        for host in self.hosts:
            part = dict(options) if options else None
            if mask is not None:
                part = {**(part or {}), "reset_mask": mask[host.offset : host.offset + host.num_envs]}
                if not part["reset_mask"].any():
                    headers.append(None)  # none of this host's envs: it keeps its observation, as gymnasium's do
                    continue
            whole = mask is None or bool(mask[host.offset : host.offset + host.num_envs].all())
            shown = self.recovery.replaced(host, whole)
            if shown is not None:
                self.showing[host.index] = shown  # this reset shows the restart
            headers.append({"cmd": RESET, "seed": seeds[host.offset : host.offset + host.num_envs], "options": part})
        return self.exchange.post(headers, what="reset")

    def reset_result(self, timeout: Optional[float]) -> tuple[Any, dict[str, Any]]:
        posted, self.posted = self.posted, None
        assert posted is not None
        replies = self.exchange.collect(posted, timeout)
        showing, self.showing = self.showing, {}
        for n, (host, header, data) in enumerate(replies):
            if host.index in showing and isinstance(header.get("infos"), list):
                infos = header["infos"] + self.recovery.restarted_infos(host, showing[host.index])
                replies[n] = (host, {**header, "infos": infos}, data)
        return self._observed(replies)

    def step(self, actions: Any) -> None:
        hosts = self.hosts
        parts = self.arrays.split_actions(
            actions, self.num_envs, len(hosts), lambda i: slice(hosts[i].offset, hosts[i].offset + hosts[i].num_envs)
        )
        owing = self.recovery.owing()  # (hosts whose step a restart makes)
        headers = [None if host.index in owing else {"cmd": STEP, **fields} for host, (fields, _) in zip(hosts, parts)]
        self.posted = self.exchange.post(headers, [a for _, a in parts], "step")

    def step_result(self, timeout: Optional[float]) -> Step:
        posted, self.posted = self.posted, None
        assert posted is not None
        replies = self.exchange.collect(posted, timeout)
        counts = [host.num_envs for host in self.hosts]
        obs = self.arrays.observations(replies, counts, every_host=True)
        reward, terminated, truncated = self.arrays.flags(replies, counts)
        return obs, reward, terminated, truncated, self.arrays.infos(replies, self.num_envs)

    def restore(self, states: dict[int, bytes], allow_pickle: bool) -> tuple[Any, dict[str, Any]]:
        """Each host that serves some of the envs restores its own; every env's observation comes
        back (the others' as they were)."""
        headers: list[Optional[dict[str, Any]]] = []
        for host in self.hosts:
            local = [i for i in states if host.offset <= i < host.offset + host.num_envs]
            if not local:
                headers.append(None)
                continue
            self.recovery.replaced(host, False)
            headers.append(
                {
                    "cmd": SET_STATE,
                    "env_ids": [i - host.offset for i in local],
                    "states": [states[i] for i in local],
                    "allow_pickle": allow_pickle,
                }
            )
        return self._observed(self.exchange.ask(headers, "set_state"))

    def _observed(self, replies: list[Reply]) -> tuple[Any, dict[str, Any]]:
        counts = [host.num_envs for host in self.hosts]
        return self.arrays.observations(replies, counts, every_host=True), self.arrays.infos(replies, self.num_envs)
