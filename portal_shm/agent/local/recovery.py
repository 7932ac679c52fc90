"""Recovery policy of a VectorPortal: what happens when an env's runtime fails.

``on_env_failure="raise"`` (the default) turns every failure into an exception naming the env,
its runtime and the cause. ``on_env_failure="restart"`` replaces the failed env server with a
fresh one (a new process or container from the same spec) and lets the portal go on:

- A failure is a server that died (segfault, ``os._exit``, SIGKILL, OOM, ``docker kill``), that
  did not answer within ``step_timeout``, that broke the protocol, or an env that raised in
  ``step`` or ``reset``. An exception inside ``call``/``render``/``set_attr`` is reported, not
  restarted: the server is still healthy. Nor is a value an env gave that is too big for one
  control message (``MessageTooBigError``), nor an info value that cannot reach the agent as it is
  (``InfoEncodingError``): it would come back the same, so the caller gets the error and the
  server goes on. A hung server is only noticed with ``step_timeout`` set; without
  it the agent waits for as long as the server lives.
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
- Exact restarts at an episode's boundary (lockstep portals): with this policy each server writes
  the states of the envs whose episode ended in a step to a file in the run directory once that
  step's results are out (the env's generators and its wrappers' at the end, ``server/state/``;
  plain envs need no adapter; ``wire/end_states.py``), read only if it fails. When a server fails in the step right after all of
  its envs ended an episode (NEXT_STEP: the autoreset step, where resets run; SAME_STEP: the
  first step of the new episodes), the fresh server is given those states and makes that step
  again with the same actions: its results are the ones the failed server would have given, the
  envs' episodes are not cut (no truncation), and ``env_restarted`` with ``env_failure`` still
  shows in the step's infos and the restart counts. A fresh server that fails the step again (a
  failure its generators cause comes back with them) ends the episodes as below, with
  ``restart_seed``, which moves past it. A failure anywhere else in an episode ends the episode:
  its state was not taken there (taking it at every step would cost the hot path). Async batches
  end the episode too; a remote host's own portal repairs its servers this way, while a host lost
  as a whole ends its envs' episodes. A recycled server's fresh one that fails is restored
  the same way: the agent holds the states it swapped with.
- Each env may be restarted ``max_restarts`` times over the portal's life; the next failure
  raises ``RestartLimitError`` (and so does a fresh server that cannot start or that describes
  other spaces than the one it replaces). Every fresh server started in place of a failed one
  spends one, also one that failed in turn and one started in place by a recycle (below).
- Counting (``envs.restarts``, ``stats()["envs"][i]["restarts"]``): an env's restarts are the
  times its episode was ended by a restart, and each one is shown exactly once in the infos as
  ``env_restarted``: in the step that ends the episode, or in the infos of a ``reset`` (or
  ``set_state``) that repeated itself on a fresh server or that came before that step (a server
  restarted by a failed call, then a reset). A server that fails again before its envs showed
  their restart (its fresh server failed to start, or to reset, or a second call failed) adds no
  count: the envs show one restart. Not counted and not in the infos: a recycled server's fresh
  one that fails after its predecessor closed, restarted in place and given the envs' states
  (their episodes go on unchanged; ``recycler.py``). ``envs.restart_log`` lists every restart:
  its envs, phase (``step``, ``reset``, ``call``, ``recycle``), cause, whether it counts and where
  its infos showed it. Restarts of a pending call that ``close()`` waits for are counted, and
  their infos are never seen.
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

import os
from dataclasses import dataclass
from typing import Any, NamedTuple, Optional

from gymnasium.vector import AutoresetMode

from ...errors import (
    EnvError,
    PortalError,
    PortalTimeoutError,
    RestartLimitError,
    ServerDiedError,
    ServerProtocolError,
)
from ...wire.end_states import end_states_path, max_file_bytes, read_record
from ...wire.protocol import ERROR, REPLY, RESET, ProtocolError, unpackb
from ..contract.failure import NOT_FAILURES, FailurePolicy, failures, repairing
from ..contract.infos import add_info
from ..contract.restarts import restart_infos, restart_seed
from ..contract.validate import check_end_states, check_reply
from .ring_views import RingViews, SavedRows
from .session import PortalSession, ServerLink

#: The failures of a server a restart repairs (``FailurePolicy.handles`` says whether it does).
RESTARTABLE = (ServerDiedError, PortalTimeoutError, ServerProtocolError, EnvError)
__all__ = ["NOT_FAILURES", "RESTARTABLE", "Recovery", "RestartRecord", "StandIn", "failures"]  # (re-exported)


class StandIn(NamedTuple):
    """A step's result the agent wrote into the ring in place of a server (async batches)."""

    extras: dict[int, bytes]  # infos blobs of the slot's rows that spilled (env index -> blob)
    infos: dict[int, dict[str, Any]]  # env index -> infos to add to what its row decodes to


@dataclass
class RestartRecord:
    """One restart of a server (``Recovery.log``): what failed, when, and where the infos showed it."""

    envs: list[int]
    phase: str  # where the failure was found: "step", "reset", "call" or "recycle" (restarted in place)
    cause: str  # the failure: its type and first line
    counted: bool  # in ``restarts`` (its envs' episodes end): shown in the infos once
    attempts: int = 0  # fresh servers started for it (one more for each that failed in turn)
    shown: Optional[str] = None  # where ``env_restarted`` reached the infos: "step", "reset" or "batch"

    def as_dict(self) -> dict[str, Any]:
        return {
            "envs": list(self.envs),
            "phase": self.phase,
            "cause": self.cause,
            "counted": self.counted,
            "attempts": self.attempts,
            "shown": self.shown,
        }


def _first_line(cause: BaseException, limit: int = 500) -> str:
    lines = str(cause).splitlines()
    return lines[0][:limit] if lines else ""


class Recovery(FailurePolicy):
    """Restart bookkeeping of one portal: restart counts, seeds, and episodes still to end.

    The shared part of both failure policies (``failure.py``): they differ only in the answers of
    ``FailurePolicy`` (whether a failure is raised or repaired); under either, a recycled server
    whose fresh one fails is restarted in place and envs reset as their next step. It gets what
    it works on passed in (the session that restarts servers, the ring views it writes a failed
    server's rows into) and keeps no pointer to the portal.
    """

    def __init__(
        self,
        session: PortalSession,
        ring: RingViews,
        autoreset_mode: AutoresetMode,
        step_timeout: Optional[float],
        max_restarts: int,
        startup_timeout: float,
    ) -> None:
        self.session = session
        self.ring = ring
        self.mode = autoreset_mode
        self.step_timeout = step_timeout
        self.max_restarts = max_restarts
        self.startup_timeout = startup_timeout
        self.restarts = [0] * ring.num_envs  # episodes ended by a restart (shown once each in the infos)
        self.spent = [0] * ring.num_envs  # fresh servers started in place of failed ones (``max_restarts``)
        self.log: list[RestartRecord] = []
        self.failures: dict[int, str] = {}  # server -> its last counted restart's ``env_failure``
        self.unshown: dict[int, RestartRecord] = {}  # server -> its counted restart the infos did not show yet
        self.reset_shows: set[int] = set()  # servers whose restarts the reset in progress shows
        self.seeds: list[Optional[int]] = [None] * ring.num_envs
        self.resetting: set[int] = set()  # NEXT_STEP: servers whose envs reset in the next step
        self.ended: set[int] = set()  # servers whose envs end their episode in the next step
        # servers that failed while ``begin_step`` started their reset
        self.failed_early: dict[int, BaseException] = {}
        self.causes: dict[int, BaseException] = {}
        # async batches, NEXT_STEP: server -> its fresh envs' reset rows and their infos blobs
        self.replays: dict[int, tuple[SavedRows, dict[int, bytes]]] = {}
        self.next_seeds: dict[int, list[Optional[int]]] = {}  # seeds of a reset asked for by ``reset_next_step``

    @property
    def pending(self) -> bool:
        """Whether the next step of some server is not a plain step (the policy has work in it)."""
        return bool(self.resetting or self.ended or self.failed_early)

    def busy(self, index: int) -> bool:
        """Whether server ``index``'s next step belongs to this policy (a restart is under way)."""
        return index in self.resetting or index in self.ended or index in self.failed_early or index in self.replays

    # -- bookkeeping -----------------------------------------------------------------------
    def note_reset(self, seeds: list[Optional[int]], mask: Optional[Any]) -> None:
        """A user reset: remember the seeds, forget pending ends of the envs it covers."""
        for i, seed in enumerate(seeds):
            if mask is None or mask[i]:
                self.seeds[i] = seed
        self.reset_shows = set()
        for server in self.session.servers:
            if mask is None or all(mask[i] for i in server.env_indices):
                self.reset_shows.add(server.index)  # a restart its envs did not show yet: this reset shows it
                self.resetting.discard(server.index)
                self.ended.discard(server.index)
                self.replays.pop(server.index, None)
                self.next_seeds.pop(server.index, None)

    def restart(self, server: ServerLink, cause: BaseException, phase: str = "step", counted: bool = True) -> None:
        """Start a fresh server in place of ``server``, within every env's restart budget.

        ``counted``: its envs' episodes end, which the infos show once (``shown``); a server whose
        last counted restart was not shown yet adds none (its envs show one). ``phase``: where the
        failure was found (``restart_log``)."""
        record = self.unshown.get(server.index) if counted else None
        while True:
            used = max(self.spent[i] for i in server.env_indices)
            if used >= self.max_restarts:
                raise RestartLimitError(server.env_indices, used, server.runtime(), cause) from cause
            if record is None:  # (logged and counted once a fresh server is started for it)
                what = f"{type(cause).__name__}: {_first_line(cause, 300)}"
                record = RestartRecord(list(server.env_indices), phase, what, counted)
                self.log.append(record)
                if counted:
                    self.unshown[server.index] = record
                    self.failures[server.index] = _first_line(cause)
                    for i in server.env_indices:
                        self.restarts[i] += 1
            for i in server.env_indices:
                self.spent[i] += 1
            record.attempts += 1
            try:
                self.session.restart(server, self.startup_timeout)
                return
            except PortalError as exc:  # the fresh server failed as well: that costs a restart too
                cause = exc

    def shown(self, index: int, where: str) -> None:
        """Server ``index``'s envs' ``env_restarted`` reached the infos (``where``): its restart is shown."""
        record = self.unshown.pop(index, None)
        if record is not None:
            record.shown = where

    def reset_infos(self) -> dict[int, dict[int, dict[str, Any]]]:
        """Per server, the ``env_restarted`` infos of the reset (or set_state) just collected: servers it
        restarted, and servers it covers whole whose restart was not shown yet (a failed call's, whose
        episode end the reset replaced). The caller marks them ``shown`` once handed out."""
        out: dict[int, dict[int, dict[str, Any]]] = {}
        for server in self.session.servers:
            record = self.unshown.get(server.index)
            if record is not None and server.index in self.reset_shows:
                self.causes.pop(server.index, None)
                infos = out[server.index] = restart_infos(server.env_indices, None, {})
                for info in infos.values():
                    info["env_failure"] = self.failures.get(server.index, "")
        self.reset_shows = set()
        return out

    def reset_next_step(self, server: ServerLink, seeds: list[Optional[int]]) -> None:
        """NEXT_STEP: reset ``server``'s envs with ``seeds`` as their next step (the autoreset step of
        envs whose episode just ended, in a fresh server: recycling envs without states)."""
        self.next_seeds[server.index] = seeds
        self.resetting.add(server.index)

    def _reset_message(self, server: ServerLink, k: int, prev: int) -> dict[str, Any]:
        seeds = self.next_seeds.pop(server.index, None)
        if seeds is None:
            seeds = [restart_seed(self.seeds[i], self.restarts[i]) for i in server.env_indices]
        return {"cmd": RESET, "slot": k, "prev_slot": prev, "seeds": seeds, "options": None, "mask": None}

    # -- exact restarts at an episode's boundary --------------------------------------------
    def redo_states(self, server: ServerLink, step_seq: int) -> Optional[dict[int, bytes]]:
        """The states to restart the failed ``server`` from and make its failed step (command
        number ``step_seq``) again: those it wrote for every env of it at the command just before,
        a step that ended all their episodes (no call or reset between); else None. Read from the
        file it leaves them in (``wire/end_states.py``), which is then removed. Asked only for a
        failure the policy ``handles``."""
        if self.busy(server.index):
            return None
        path = end_states_path(self.session.resources.run_dir, server.token)
        data = read_record(path, max_file_bytes(len(server.env_indices)))
        try:
            os.unlink(path)
        except OSError:
            pass
        if data is None:
            return None
        try:
            ends = unpackb(data).get("ends")
            seqs = {i: entry[0] for i, entry in ends.items()}
            states = check_end_states({i: entry[1] for i, entry in ends.items()}, server.env_indices, server.describe())
        except (ProtocolError, AttributeError, TypeError, IndexError, KeyError, ServerProtocolError):
            return None  # not what a server writes: nothing to resume from (the restart ends the episodes)
        if not all(i in states and seqs.get(i) == step_seq - 1 for i in server.env_indices):
            return None
        return {i: states[i] for i in server.env_indices}

    # -- steps -----------------------------------------------------------------------------
    def begin_step(self, server: ServerLink, k: int) -> bool:
        """Start this server's part of step ``k`` when it is not a plain step; True if so."""
        if server.index in self.ended:
            return True
        if server.index not in self.resetting:
            return False
        self.ring.clear_results(k, server.rows)
        try:
            server.channel.send(self._reset_message(server, k, self.ring.previous[k]), server.check_alive)
        except RESTARTABLE as exc:  # the fresh server died already: handled as a failure of this step
            self.resetting.discard(server.index)
            self.failed_early[server.index] = repairing(exc)
            return True
        server.post_control()
        return True

    def finish_reset(self, server: ServerLink, timeout: Optional[float]) -> dict[int, bytes]:
        """Collect the reply of a reset started by ``begin_step``; returns its infos blobs."""
        message = server.recv(timeout, "reset of a restarted env")
        if message["cmd"] == ERROR:
            raise server.error(message)
        if message["cmd"] != REPLY:
            raise ServerProtocolError(f"{server.describe()} answered reset with {message['cmd']!r:.40}")
        self.resetting.discard(server.index)
        return check_reply(message, server.env_indices, server.describe())[0]

    def end_episodes(
        self, server: ServerLink, k: int, infos: dict[str, Any], cause: Optional[BaseException]
    ) -> dict[str, Any]:
        """Restart ``server`` (after a failure in step ``k``) and end its envs' episodes in slot ``k``."""
        ring = self.ring
        cause = self._restart_for(server, cause)
        prev = ring.previous[k]
        final = self._final_obs(server, prev) if self.mode is AutoresetMode.SAME_STEP else {}
        ring.truncate(k, prev, server.rows)
        if self.mode is AutoresetMode.SAME_STEP:
            extras = self._reset_now(server, k, prev)
            infos = ring.gather(k, extras, infos, server.env_indices)
        elif self.mode is AutoresetMode.NEXT_STEP:
            self.resetting.add(server.index)
        for i, info in restart_infos(server.env_indices, cause, final).items():
            infos = add_info(infos, info, i, ring.num_envs)
        self.shown(server.index, "step")
        return infos

    def _restart_for(self, server: ServerLink, cause: Optional[BaseException]) -> Optional[BaseException]:
        """Restart ``server`` after ``cause``; without one, it was restarted by a failed call: its cause."""
        earlier = self.causes.pop(server.index, None)
        self.ended.discard(server.index)
        if cause is None:
            return earlier
        self.restart(server, cause)
        return cause

    def _final_obs(self, server: ServerLink, prev: int) -> dict[int, Any]:
        return {i: self.ring.env_obs(prev, i) for i in server.env_indices}

    # -- async batches -----------------------------------------------------------------------
    def end_batched(self, server: ServerLink, k: int, cause: Optional[BaseException]) -> StandIn:
        """``end_episodes`` for async batches: the fresh server's envs are reset now, into slot ``k``.

        In NEXT_STEP the reset's rows are kept for ``replay`` and slot ``k`` gets the last
        observation back; the module docstring says why the reset cannot wait for the next step.
        """
        ring, rows = self.ring, server.rows
        cause = self._restart_for(server, cause)
        prev = (k - 1) % ring.ring_depth
        if self.mode is AutoresetMode.SAME_STEP:
            final = self._final_obs(server, prev)
            ring.truncate(k, prev, rows)
            extras = self._reset_now(server, k, prev)
        else:
            extras = self._reset_now(server, k, prev)
            self.replays[server.index] = (ring.save_rows(k, rows), extras)
            ring.truncate(k, prev, rows)
            final, extras = {}, {}
        return StandIn(extras, restart_infos(server.env_indices, cause, final))

    def replay(self, server: ServerLink, k: int) -> StandIn:
        """NEXT_STEP: write the fresh envs' reset into slot ``k`` as the result of their next step."""
        saved, extras = self.replays.pop(server.index)
        self.ring.restore_rows(k, server.rows, saved)
        return StandIn(extras, {})

    def stand_in(self, server: ServerLink, k: int) -> Optional[StandIn]:
        """The result of the server's step in slot ``k`` when the agent makes it instead of waking it."""
        if server.index in self.ended:
            return self.end_batched(server, k, None)
        if server.index in self.replays:
            return self.replay(server, k)
        return None

    def _reset_now(self, server: ServerLink, k: int, prev: int) -> dict[int, bytes]:
        """Reset a fresh server's envs into slot ``k`` (SAME_STEP, or batches), restarting it if it fails."""
        while True:
            try:
                server.channel.send(self._reset_message(server, k, prev), server.check_alive)
                server.post_control()
                self.resetting.add(server.index)
                return self.finish_reset(server, self.step_timeout)
            except RESTARTABLE as exc:
                self.restart(server, exc)

    # -- control calls ---------------------------------------------------------------------
    def after_control_failure(self, server: ServerLink, cause: BaseException) -> None:
        """A server failed during call/render/set_attr: restart it; its envs end at the next step."""
        self.restart(server, cause, "call")
        self.causes[server.index] = cause
        self.resetting.discard(server.index)
        self.replays.pop(server.index, None)
        self.ended.add(server.index)

    def retry_reset(self, server: ServerLink, message: dict[str, Any], cause: BaseException) -> dict[int, bytes]:
        """A server failed during a user reset: restart it and repeat the reset for its envs."""
        self.reset_shows.add(server.index)
        while True:
            self.restart(server, cause, "reset")
            self.resetting.discard(server.index)
            self.ended.discard(server.index)
            try:
                server.channel.send(message, server.check_alive)
                server.post_control()
                return self.finish_reset(server, self.step_timeout)
            except RESTARTABLE as exc:
                cause = exc
