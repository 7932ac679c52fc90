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
from typing import Any, Optional

import numpy as np

from .. import errors as E
from ..agent.recovery import check_policy, restart_seed
from . import messages as M
from . import trees
from .link import HostLink, wait


class HostRecovery:
    """Restart bookkeeping of a RemoteVectorPortal: restart counts and seeds per env."""

    def __init__(self, portal: Any, policy: str, max_restarts: int, timeout: float) -> None:
        """``portal``: the RemoteVectorPortal that owns this policy (typed ``Any``: it imports this module)."""
        check_policy(policy, max_restarts)
        self.portal = portal
        self.enabled = policy == "restart"
        self.max_restarts = max_restarts
        self.timeout = timeout
        self.restarts = [0] * portal.num_envs
        self.seeds: list = [None] * portal.num_envs

    def reconnect(self, index: int, cause: BaseException, batched: bool = False) -> tuple[HostLink, list, list]:
        """A fresh session on host ``index`` with its envs reset: (link, obs columns, sparse infos).

        With async batches the reset's observations come as batches instead: ([], []) then.
        """
        portal = self.portal
        old: HostLink = portal._links[index]
        envs = old.env_indices
        spent = [i for i in envs if self.restarts[i] >= self.max_restarts]
        if spent:
            raise E.RestartLimitError(spent, self.restarts[spent[0]], f"host {old.address}", cause) from cause
        deadline = time.monotonic() + self.timeout
        address = portal._address_after_loss(index, old.address, deadline)
        old.close()
        while True:
            link = portal._open_link(index, address, old.offset, old.num_envs)
            portal._links[index] = link
            try:
                wait([link], lambda: [] if 1 in portal.results_of(link) else [link], deadline, "reconnecting")
                portal._welcome(link)
                break
            except E.HostLostError:
                link.close()
                if time.monotonic() > deadline:
                    raise E.HostLostError(
                        address, envs, f"not back within startup_timeout={self.timeout:g} s after: {cause}"
                    ) from cause
        for i in envs:
            self.restarts[i] += 1
        seeds = [restart_seed(self.seeds[i], self.restarts[i]) for i in envs]
        seq = link.send({"cmd": M.RESET, "seed": seeds, "options": None})
        wait(
            [link],
            lambda: [] if seq in link.results else [link],
            deadline + portal.backend.heartbeat_timeout,
            "resetting restarted envs",
        )
        header, data = link.results.pop(seq)
        if header["cmd"] == M.ERROR:
            raise E.PortalError(f"host {link.address} could not reset the restarted envs: {header.get('message')}")
        if batched:
            return link, [], []
        columns = portal._checked_obs(link, data, link.num_envs)
        return link, columns, header.get("infos", [])

    def end_step(self, index: int, cause: BaseException, last_obs: list) -> tuple:
        """The lost host's part of the step that found the loss: (link, header, arrays)."""
        portal = self.portal
        link, fresh, reset_infos = self.reconnect(index, cause)
        count = link.num_envs
        line = str(cause).splitlines()[0][:500]
        mode = portal.autoreset_mode.value
        infos: list = []
        for j in range(count):
            info = {"env_restarted": True, "env_failure": line}
            if mode == "SameStep":
                info["final_obs"] = trees.unflatten([column[j] for column in last_obs], portal._obs_schema)
                info["final_info"] = {}
            infos.append([j, info])
        flags = [np.zeros(count, np.float64), np.zeros(count, np.bool_), np.ones(count, np.bool_)]
        if mode == "SameStep":
            for j, info in reset_infos:
                infos[j][1] = {**info, **infos[j][1]}
            link.last_obs = fresh
            return link, {"infos": infos}, fresh + flags
        if mode == "NextStep":  # the next step hands out the reset, as gymnasium's autoreset would
            link.stand_in = ({"infos": reset_infos}, fresh + [flags[0], flags[1], np.zeros(count, np.bool_)])
        link.last_obs = last_obs
        return link, {"infos": infos}, last_obs + flags

    def note_reset(self, seeds: list, options: Optional[dict]) -> None:
        mask = (options or {}).get("reset_mask")
        for i, seed in enumerate(seeds):
            if mask is None or mask[i]:
                self.seeds[i] = seed

    def restart_batched(self, index: int, cause: BaseException) -> None:
        """Async batches: host ``index`` is back with its envs reset; mark them for their next batch."""
        link, _, _ = self.reconnect(index, cause, batched=True)
        link.in_flight = link.num_envs
        line = str(cause).splitlines()[0][:500]
        link.restarted = {j: line for j in range(link.num_envs)}

    @staticmethod
    def mark_restarted(link: HostLink, ids: list, reward: np.ndarray, truncated: np.ndarray, infos: dict) -> tuple:
        """The batch that brings restarted envs' resets: truncated, reward 0, ``env_restarted``."""
        from ..agent.infos import add_info

        rows = [row for row, j in enumerate(ids) if j in link.restarted]
        if not rows:
            return reward, truncated, infos
        reward, truncated = np.array(reward), np.array(truncated)
        for row in rows:
            line = link.restarted.pop(ids[row])
            reward[row], truncated[row] = 0.0, True
            infos = add_info(infos, {"env_restarted": True, "env_failure": line}, row, len(ids))
        return reward, truncated, infos
