"""Recovery policy of a VectorPortal: what happens when an env's runtime fails.

``on_env_failure="raise"`` (the default) turns every failure into an exception naming the env,
its runtime and the cause. ``on_env_failure="restart"`` replaces the failed env server with a
fresh one (a new process or container from the same spec) and lets the portal go on:

- A failure is a server that died (segfault, ``os._exit``, SIGKILL, OOM, ``docker kill``), that
  did not answer within ``step_timeout``, that broke the protocol, or an env that raised in
  ``step`` or ``reset``. An exception inside ``call``/``render``/``set_attr`` is reported, not
  restarted: the server is still healthy. A hung server is only noticed with ``step_timeout``
  set; without it the agent waits for as long as the server lives.
- The unit of restart is the server: every env it hosts is restarted. Pass
  ``envs_per_server=1`` to confine a failure to one env.
- In the step where the failure shows, each restarted env reports ``truncated=True``,
  ``terminated=False``, reward 0 and ``info["env_restarted"] = True`` (with the cause in
  ``info["env_failure"]``); its episode ends there. In NEXT_STEP mode the observation is the last
  one the env returned and the following step returns the fresh env's reset observation (reward
  0, the action ignored), exactly like an autoreset. In SAME_STEP mode the step returns the reset
  observation at once, the last observation in ``info["final_obs"]``. In DISABLED mode the
  observation is the last one and the env waits for ``reset(options={"reset_mask": ...})``.
  The other envs keep stepping, undisturbed.
- A failure during ``reset`` restarts the server and repeats that reset for its envs.
  A server that fails during ``call``/``render``/``set_attr`` is restarted and the call raises;
  its envs' episodes end (truncated) at the next step.
- Seed policy: a restarted env is reset with ``restart_seed(seed, restarts)``, where ``seed`` is
  the seed that env got at its last seeded ``reset`` and ``restarts`` counts its restarts so far
  (1 for the first); unseeded envs get ``None``. Runs stay reproducible: kill the same servers at
  the same steps and the same observations come back.
- Each env may be restarted ``max_restarts`` times over the portal's life; the next failure
  raises ``RestartLimitError`` (and so does a fresh server that cannot start or that describes
  other spaces than the one it replaces).
- Async batches (``batch_size``): the same per-env results, in the batch that hands the failed
  server out. A server found dead or past ``step_timeout`` (counted from its ``send``) while
  stepping is restarted at once and its failed step joins ``ready`` as if it had just finished;
  an env error or broken protocol shows when its batch is taken, and that very batch carries the
  failed step. Servers of other batches in flight step on undisturbed. The fresh server's envs
  are reset right after the restart (a reply on the control channel rings no doorbell ``recv``
  could wait on): SAME_STEP returns that observation at once; NEXT_STEP keeps it and returns it
  when the envs are next sent (reward 0, the actions ignored), without waking the server. A fresh
  server whose reset fails is restarted again at once. After a failed ``call`` the envs' episodes
  end at their next ``send``.
"""

from __future__ import annotations

from typing import Any, NamedTuple, Optional

import numpy as np

from ..errors import EnvError, PortalError, PortalTimeoutError, RestartLimitError, ServerDiedError, ServerProtocolError
from ..wire import protocol as P
from ..wire.schema import is_fixed, leaves
from .infos import add_info
from .session import ServerLink
from .validate import check_reply

POLICIES = ("raise", "restart")
RESTARTABLE = (ServerDiedError, PortalTimeoutError, ServerProtocolError, EnvError)


def check_policy(policy: str, max_restarts: int) -> None:
    """``on_env_failure`` and ``max_restarts`` as a portal, local or remote, accepts them."""
    if policy not in POLICIES:
        raise ValueError(f"on_env_failure must be one of {POLICIES}, got {policy!r}")
    if max_restarts < 0:
        raise ValueError(f"max_restarts must be >= 0, got {max_restarts}")


class StandIn(NamedTuple):
    """A step's result the agent wrote into the ring in place of a server (async batches)."""

    extras: dict  # infos blobs of the slot's rows that spilled (env index -> blob)
    infos: dict  # env index -> infos to add to what its row decodes to


def restart_seed(seed: Optional[int], restarts: int) -> Optional[int]:
    """The seed a restarted env is reset with: derived from its last seed and its restart count."""
    if seed is None:
        return None
    return int(np.random.SeedSequence([int(seed) % 2**64, restarts]).generate_state(1)[0])


class Recovery:
    """Restart bookkeeping of one portal: restart counts, seeds, and episodes still to end."""

    def __init__(self, portal: Any, policy: str, max_restarts: int, startup_timeout: float) -> None:
        """``portal`` is the VectorPortal that owns this policy; it works on the portal's ring views and
        session directly (typed ``Any``: ``vector`` imports this module, never the other way round)."""
        check_policy(policy, max_restarts)
        self.portal = portal
        self.enabled = policy == "restart"
        self.max_restarts = max_restarts
        self.startup_timeout = startup_timeout
        self.restarts = [0] * portal.num_envs
        self.seeds: list = [None] * portal.num_envs
        self.resetting: set = set()  # NEXT_STEP: servers whose envs reset in the next step
        self.ended: set = set()  # servers whose envs end their episode in the next step
        self.failed_early: dict = {}  # servers that failed while ``begin_step`` started their reset
        self.causes: dict = {}
        self.replays: dict = {}  # async batches, NEXT_STEP: server -> its fresh envs' reset rows

    # -- bookkeeping -----------------------------------------------------------------------
    def note_reset(self, seeds: list, mask: Optional[Any]) -> None:
        """A user reset: remember the seeds, forget pending ends of the envs it covers."""
        for i, seed in enumerate(seeds):
            if mask is None or mask[i]:
                self.seeds[i] = seed
        for server in self.portal._session.servers:
            if mask is None or all(mask[i] for i in server.env_indices):
                self.resetting.discard(server.index)
                self.ended.discard(server.index)
                self.replays.pop(server.index, None)

    def restart(self, server: ServerLink, cause: BaseException) -> None:
        """Start a fresh server in place of ``server``, within every env's restart budget."""
        session = self.portal._session
        while True:
            used = max(self.restarts[i] for i in server.env_indices)
            if used >= self.max_restarts:
                raise RestartLimitError(server.env_indices, used, server.handle.describe(), cause) from cause
            for i in server.env_indices:
                self.restarts[i] += 1
            try:
                session.restart(server, self.startup_timeout)
                return
            except PortalError as exc:  # the fresh server failed as well: that costs a restart too
                cause = exc

    def _reset_message(self, server: ServerLink, k: int, prev: int) -> dict:
        seeds = [restart_seed(self.seeds[i], self.restarts[i]) for i in server.env_indices]
        return {"cmd": P.RESET, "slot": k, "prev_slot": prev, "seeds": seeds, "options": None, "mask": None}

    # -- steps -----------------------------------------------------------------------------
    def begin_step(self, server: ServerLink, k: int) -> bool:
        """Start this server's part of step ``k`` when it is not a plain step; True if so."""
        if server.index in self.ended:
            return True
        if server.index not in self.resetting:
            return False
        portal = self.portal
        for i in server.env_indices:
            portal._reward[k, i] = 0.0
            portal._terminated[k, i] = False
            portal._truncated[k, i] = False
        try:
            server.channel.send(self._reset_message(server, k, (k - 1) % portal.ring_depth), server.check_alive)
        except RESTARTABLE as exc:  # the fresh server died already: handled as a failure of this step
            self.resetting.discard(server.index)
            self.failed_early[server.index] = exc
            return True
        server.post(P.CMD_CONTROL)
        return True

    def finish_reset(self, server: ServerLink, timeout: Optional[float]) -> dict:
        """Collect the reply of a reset started by ``begin_step``; returns its infos blobs."""
        message = server.recv(timeout, "reset of a restarted env")
        if message["cmd"] == P.ERROR:
            raise server.error(message)
        if message["cmd"] != P.REPLY:
            raise ServerProtocolError(f"{server.describe()} answered reset with {message['cmd']!r:.40}")
        self.resetting.discard(server.index)
        return check_reply(message, server.env_indices, server.describe())[0]

    def end_episodes(self, server: ServerLink, k: int, infos: dict, cause: Optional[BaseException]) -> dict:
        """Restart ``server`` (after a failure in step ``k``) and end its envs' episodes in slot ``k``."""
        portal = self.portal
        cause = self._restart_for(server, cause)
        prev = (k - 1) % portal.ring_depth
        mode = portal.autoreset_mode.value
        final = self._final_obs(server, prev) if mode == "SameStep" else {}
        self._truncate(server, k, prev)
        if mode == "SameStep":
            extras = self._reset_now(server, k, prev)
            infos = portal._gather(k, extras, infos, server.env_indices)
        elif mode == "NextStep":
            self.resetting.add(server.index)
        for i, info in self._restart_infos(server, cause, final).items():
            infos = add_info(infos, info, i, portal.num_envs)
        return infos

    def _restart_for(self, server: ServerLink, cause: Optional[BaseException]) -> Optional[BaseException]:
        """Restart ``server`` after ``cause``; without one, it was restarted by a failed call: its cause."""
        earlier = self.causes.pop(server.index, None)
        self.ended.discard(server.index)
        if cause is None:
            return earlier
        self.restart(server, cause)
        return cause

    def _final_obs(self, server: ServerLink, prev: int) -> dict:
        return {i: self._env_obs(prev, i) for i in server.env_indices}

    def _truncate(self, server: ServerLink, k: int, prev: int) -> None:
        """Slot ``k`` of the server's envs: their last observation, reward 0, truncated, no infos."""
        portal = self.portal
        for i in server.env_indices:
            for view in portal._obs_fixed_views:
                view[k, i] = view[prev, i]
            portal._reward[k, i] = 0.0
            portal._terminated[k, i] = False
            portal._truncated[k, i] = True
            portal._info_len[k, i] = 0

    def _restart_infos(self, server: ServerLink, cause: Optional[BaseException], final: dict) -> dict:
        """Each env's infos of the step that ended its episode by a restart (``final``: SAME_STEP's)."""
        first_line = str(cause).splitlines()[0][:500] if cause is not None else ""
        out = {}
        for i in server.env_indices:
            out[i] = {"env_restarted": True, "env_failure": first_line}
            if final:
                out[i].update({"final_obs": final[i], "final_info": {}})
        return out

    # -- async batches -----------------------------------------------------------------------
    def end_batched(self, server: ServerLink, k: int, cause: Optional[BaseException]) -> StandIn:
        """``end_episodes`` for async batches: the fresh server's envs are reset now, into slot ``k``.

        In NEXT_STEP the reset's rows are kept for ``replay`` and slot ``k`` gets the last
        observation back; the module docstring says why the reset cannot wait for the next step.
        """
        portal = self.portal
        cause = self._restart_for(server, cause)
        prev = (k - 1) % portal.ring_depth
        if portal.autoreset_mode.value == "SameStep":
            final = self._final_obs(server, prev)
            self._truncate(server, k, prev)
            extras = self._reset_now(server, k, prev)
        else:
            self.replays[server.index] = self._rows(server, k, self._reset_now(server, k, prev))
            self._truncate(server, k, prev)
            final, extras = {}, {}
        return StandIn(extras, self._restart_infos(server, cause, final))

    def _rows(self, server: ServerLink, k: int, extras: dict) -> tuple:
        """A copy of the server's rows of slot ``k`` that a reset writes: observations and infos."""
        portal, rows = self.portal, _env_rows(server)
        return (
            [view[k, rows].copy() for view in portal._obs_fixed_views],
            portal._info_len[k, rows].copy(),
            portal._info[k, rows].copy(),
            extras,
        )

    def replay(self, server: ServerLink, k: int) -> StandIn:
        """NEXT_STEP: write the fresh envs' reset into slot ``k`` as the result of their next step."""
        portal, rows = self.portal, _env_rows(server)
        obs, info_len, info, extras = self.replays.pop(server.index)
        for view, saved in zip(portal._obs_fixed_views, obs):
            view[k, rows] = saved
        portal._reward[k, rows] = 0.0
        portal._terminated[k, rows] = False
        portal._truncated[k, rows] = False
        portal._info_len[k, rows] = info_len
        portal._info[k, rows] = info
        return StandIn(extras, {})

    def stand_in(self, server: ServerLink, k: int) -> Optional[StandIn]:
        """The result of the server's step in slot ``k`` when the agent makes it instead of waking it."""
        if server.index in self.ended:
            return self.end_batched(server, k, None)
        if server.index in self.replays:
            return self.replay(server, k)
        return None

    def _reset_now(self, server: ServerLink, k: int, prev: int) -> dict:
        """Reset a fresh server's envs into slot ``k`` (SAME_STEP, or batches), restarting it if it fails."""
        while True:
            try:
                server.channel.send(self._reset_message(server, k, prev), server.check_alive)
                server.post(P.CMD_CONTROL)
                self.resetting.add(server.index)
                return self.finish_reset(server, self.portal.step_timeout)
            except RESTARTABLE as exc:
                self.restart(server, exc)

    def _env_obs(self, slot: int, i: int) -> Any:
        """A copy of env ``i``'s observation in ``slot``, with the structure of its space."""
        portal = self.portal
        counter = [0]

        def build(schema: dict) -> Any:
            kind = schema["kind"]
            if kind == "Dict":
                return {key: build(sub) for key, sub in schema["spaces"]}
            if kind == "Tuple":
                return tuple(build(sub) for sub in schema["spaces"])
            index = counter[0]
            counter[0] += 1
            if is_fixed(schema):
                return portal._obs_views[index][slot, i].copy()
            var = portal._var_obs[i]
            return None if var is None else var.get(index)

        return build(portal._obs_schema)

    # -- control calls ---------------------------------------------------------------------
    def after_control_failure(self, server: ServerLink, cause: BaseException) -> None:
        """A server failed during call/render/set_attr: restart it; its envs end at the next step."""
        self.restart(server, cause)
        self.causes[server.index] = cause
        self.resetting.discard(server.index)
        self.replays.pop(server.index, None)
        self.ended.add(server.index)

    def retry_reset(self, server: ServerLink, message: dict, cause: BaseException) -> dict:
        """A server failed during a user reset: restart it and repeat the reset for its envs."""
        while True:
            self.restart(server, cause)
            self.resetting.discard(server.index)
            self.ended.discard(server.index)
            try:
                server.channel.send(message, server.check_alive)
                server.post(P.CMD_CONTROL)
                return self.finish_reset(server, self.portal.step_timeout)
            except RESTARTABLE as exc:
                cause = exc


def _env_rows(server: ServerLink) -> slice:
    """The ring rows of a server's envs (consecutive)."""
    return slice(server.env_indices[0], server.env_indices[-1] + 1)


def fixed_obs_views(schema: dict, views: dict) -> tuple:
    """(views by leaf index, views of the fixed leaves only) of the ring's observation arrays."""
    by_index = {index: views[f"obs.{index}"] for index, (_, leaf) in enumerate(leaves(schema)) if is_fixed(leaf)}
    return by_index, list(by_index.values())
