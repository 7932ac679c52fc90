"""``on_env_failure="restart"`` across hosts: a lost host's envs end their episodes, the others go on.

A host that stops answering (killed, rebooted, cut off past ``heartbeat_timeout``) or that no
longer knows the agent's session is reconnected to as soon as it is back, within
``startup_timeout``: a fresh session, its envs reset with ``portal_shm.restart_seed`` of their
last seeds, as a local portal restarts a failed server. In lockstep the step that found the loss
returns, for the lost envs, their last observation, reward 0, truncated, and
``info["env_restarted"]`` (the cause in ``info["env_failure"]``); in NextStep mode the next step
returns the fresh envs' reset observation, in SameStep mode this step does (with ``final_obs``).
The other hosts' results of the step are kept: their envs are undisturbed. With async batches the
fresh envs' reset comes in their next batch, marked truncated (reward 0, ``env_restarted``): the
episode the host took with it ends there, and the next ``send`` steps the new one. Failures inside
a host (an env server dying) are the host's local portal's to restart, under the same policy.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Optional

import numpy as np
from gymnasium.vector import AutoresetMode

from ...agent.contract.failure import FailurePolicy
from ...agent.contract.infos import add_info
from ...agent.contract.restarts import restart_infos, restart_seed
from ...errors import HostLostError, PortalError, RestartLimitError
from ...wire import trees
from ..infos import HOST_PREFIX
from ..messages import ERROR, RESET
from .hosts import Hosts, RemoteHost
from .link import wait


class HostRecovery(FailurePolicy):
    """Restart bookkeeping of a RemoteVectorPortal: restart counts and seeds per env.

    The shared part of both failure policies (``failure.py``), which differ in the answers of
    ``FailurePolicy``: only the restart policy is ever handed a lost host. It gets what it needs
    passed in: the portal's hosts (which open a fresh session on a host) and how to check a
    host's observations.
    """

    def __init__(
        self,
        hosts: Hosts,
        checked_obs: Callable[[RemoteHost, list[Any], int], list[Any]],
        obs_schema: dict[str, Any],
        autoreset_mode: AutoresetMode,
        max_restarts: int,
        timeout: float,
        heartbeat_timeout: float,
    ) -> None:
        self.hosts = hosts
        self.checked_obs = checked_obs
        self.obs_schema = obs_schema
        self.mode = autoreset_mode
        self.max_restarts = max_restarts
        self.timeout = timeout
        self.heartbeat_timeout = heartbeat_timeout
        num_envs = sum(host.num_envs for host in hosts)
        self.restarts = [0] * num_envs
        self.seeds: list[Any] = [None] * num_envs
        # What restarted hosts are owed (host index -> ...), each until it is handed out:
        #: lost in a call: the next step ends its envs' episodes (the cause, the fresh envs' reset
        #: observations and infos);
        self.ended: dict[int, tuple[BaseException, list[Any], list[Any]]] = {}
        #: (header, arrays) the next step returns instead of asking the host (NEXT_STEP: the reset);
        self.stand_ins: dict[int, tuple[dict[str, Any], list[Any]]] = {}
        #: async batches: env (on the host) -> its restart infos, until a batch brings it.
        self.restarted: dict[int, dict[int, dict[str, Any]]] = {}

    def reconnect(
        self, index: int, cause: BaseException, batched: bool = False
    ) -> tuple[RemoteHost, list[Any], list[Any]]:
        """A fresh session on host ``index`` with its envs reset: (host, obs columns, sparse infos).

        With async batches the reset's observations come as batches instead: ([], []) then.
        """
        envs = self.hosts[index].env_indices
        spent = [i for i in envs if self.restarts[i] >= self.max_restarts]
        if spent:
            raise RestartLimitError(
                spent, self.restarts[spent[0]], f"host {self.hosts[index].address}", cause
            ) from cause
        deadline = time.monotonic() + self.timeout
        for i in envs:
            self.restarts[i] += 1
        seeds = [restart_seed(self.seeds[i], self.restarts[i]) for i in envs]
        while True:
            host = self.hosts.reopen(index, cause, deadline)
            link = host.link
            seq = link.send({"cmd": RESET, "seed": seeds, "options": None})
            try:
                wait(
                    [link],
                    lambda: [] if seq in link.results else [link],
                    deadline + self.heartbeat_timeout,
                    "resetting restarted envs",
                )
                break
            except HostLostError as exc:
                # Lost again between its welcome and the reset (killed and restarted once more, as the
                # chaos soak found): one more fresh session, within the same deadline.
                if time.monotonic() > deadline:
                    raise
                cause = exc
        header, data = link.results.pop(seq)
        if header["cmd"] == ERROR:
            raise PortalError(f"host {host.address} could not reset the restarted envs: {header.get('message')}")
        if batched:
            return host, [], []
        return host, self.checked_obs(host, data, host.num_envs), header.get("infos", [])

    def end_step(self, index: int, cause: BaseException, last_obs: list[Any]) -> tuple[Any, ...]:
        """The lost host's part of the step that found the loss: (host, header, arrays)."""
        host, fresh, reset_infos = self.reconnect(index, cause)
        return self.end_episodes(host, cause, last_obs, fresh, reset_infos)

    def end_later(self, index: int, cause: BaseException) -> RemoteHost:
        """Host ``index`` was lost during a call: a fresh session now, its envs reset; their episodes
        end at the next step (``end_episodes``), as a step's loss ends them."""
        _, fresh, reset_infos = self.reconnect(index, cause)
        self.ended[index] = (cause, fresh, reset_infos)
        return self.hosts[index]

    def owing(self) -> set[int]:
        """The hosts whose next step this policy makes instead of asking them."""
        return set(self.stand_ins) | set(self.ended)

    def owed_reply(self, host: RemoteHost, what: str) -> Optional[tuple[Any, ...]]:
        """The reply of ``host``, not asked in ``what``, that a restart owes: the step that ends its
        envs' episodes or the one standing in (None if none; a stand-in ends with any request)."""
        if what == "step" and host.index in self.ended:
            cause, fresh, reset_infos = self.ended.pop(host.index)
            return self.end_episodes(host, cause, host.last_obs, fresh, reset_infos)
        stand_in = self.stand_ins.pop(host.index, None)
        return (host, *stand_in) if stand_in is not None and what == "step" else None

    def replaced(self, host: RemoteHost, whole: bool) -> Optional[BaseException]:
        """A reset (``whole``: of all of ``host``'s envs) or restore replaces the step a restart
        owes the host; a whole reset shows the restart of a call (returns its cause), and its
        episodes need not end at the next step."""
        self.stand_ins.pop(host.index, None)
        if whole and host.index in self.ended:
            return self.ended.pop(host.index)[0]
        return None

    @staticmethod
    def restarted_infos(host: RemoteHost, cause: BaseException) -> list[Any]:
        """``env_restarted`` infos of every env of ``host`` (sparse, as a host sends infos)."""
        return [[j, info] for j, info in _restart_infos(host, cause, {}).items()]

    def end_episodes(
        self, host: RemoteHost, cause: BaseException, last_obs: list[Any], fresh: list[Any], reset_infos: list[Any]
    ) -> tuple[Any, ...]:
        """The step that ends a restarted host's episodes: (host, header, arrays)."""
        count = host.num_envs
        same_step = self.mode is AutoresetMode.SAME_STEP
        final = (
            {j: trees.unflatten([column[j] for column in last_obs], self.obs_schema) for j in range(count)}
            if same_step
            else {}
        )
        infos: list[Any] = [[j, info] for j, info in _restart_infos(host, cause, final).items()]
        flags = [np.zeros(count, np.float64), np.zeros(count, np.bool_), np.ones(count, np.bool_)]
        if same_step:
            for j, info in reset_infos:
                infos[j][1] = {**info, **infos[j][1]}
            host.last_obs = fresh
            return host, {"infos": infos}, fresh + flags
        if self.mode is AutoresetMode.NEXT_STEP:  # the next step hands out the reset, as gymnasium's autoreset would
            self.stand_ins[host.index] = (
                {"infos": reset_infos},
                fresh + [flags[0], flags[1], np.zeros(count, np.bool_)],
            )
        host.last_obs = last_obs
        return host, {"infos": infos}, last_obs + flags

    def note_reset(self, seeds: list[Any], options: Optional[dict[str, Any]]) -> None:
        mask = (options or {}).get("reset_mask")
        for i, seed in enumerate(seeds):
            if mask is None or mask[i]:
                self.seeds[i] = seed

    def restart_batched(self, index: int, cause: BaseException) -> None:
        """Async batches: host ``index`` is back with its envs reset; mark them for their next batch."""
        host, _, _ = self.reconnect(index, cause, batched=True)
        host.in_flight = host.num_envs
        self.restarted[index] = _restart_infos(host, cause, {})

    def mark_restarted(
        self, host: RemoteHost, ids: list[Any], reward: np.ndarray, truncated: np.ndarray, infos: dict[str, Any]
    ) -> tuple[Any, ...]:
        """The batch that brings restarted envs' resets: truncated, reward 0, ``env_restarted``."""
        restarted = self.restarted.get(host.index)
        rows = [row for row, j in enumerate(ids) if j in restarted] if restarted else []
        if not rows:
            return reward, truncated, infos
        assert restarted is not None
        reward, truncated = np.array(reward), np.array(truncated)
        for row in rows:
            reward[row], truncated[row] = 0.0, True
            infos = add_info(infos, restarted.pop(ids[row]), row, len(ids))
        if not restarted:
            del self.restarted[host.index]
        return reward, truncated, infos


def _restart_infos(host: RemoteHost, cause: BaseException, final: dict[int, Any]) -> dict[int, dict[str, Any]]:
    """A local portal's restart infos for the envs of a lost host (by their index on the host),
    ``env_failure`` worded as a host's is on this side (``infos.HOST_PREFIX``)."""
    out = restart_infos(list(range(host.num_envs)), cause, final)
    for j, info in out.items():
        info["env_failure"] = f"{HOST_PREFIX}{host.address} (envs [{host.offset + j}]): {info['env_failure']}"
    return out
