"""Recycling env servers: a warm spare per due server, swapped in at an episode end of its envs.

What happens (lockstep portals; the rules of when are ``recycle_policy.py``):

- A server that comes near due (``SPARE_AT`` of a limit) gets a spare: a fresh runtime of the same
  spec that makes its envs in the background while the portal steps on (forked from a zygote of
  that runtime where it can be: ``zygotes.py``). It is attached to the ring as soon as it said
  hello, but stands by: it reads nothing there until the swap rings its own doorbell, so it
  cannot touch the rows of the server it replaces (``EnvServer.stand_by``).
- A due server whose spare is ready steps with ``CMD_RETIRE``: in the step where all its envs end
  an episode it sends their states beside its results and holds (it reads only its control
  socket), and the spare is swapped in right after that step (one round trip: the states into
  the spare) while the old one is told CLOSE; servers past ``max_per_step`` retired in the same
  step are told RESUME and go on. Otherwise (a state that could not be taken there, or an older
  server) it is swapped before the step after one in which all its envs ended an episode, or,
  with several envs per server whose states are complete, ``wait_steps`` steps after it came due
  (a bound, since envs rarely end together); never before its spare is ready, so a swap never
  waits for a start-up, and at most ``max_per_step`` servers are swapped in one step.
- The swap carries every env's state (``get_state``/``set_state``: base env, wrappers, RNG, the
  pending autoreset): the old server closes, the spare takes its mailbox and rows, the states go
  in, and the step goes to the fresh server. In NEXT_STEP the autoreset's reset then happens in
  the fresh server with the old generator, in SAME_STEP the fresh env goes on from the reset the
  old one made: either way every transition is the one a run without recycling gives. Envs past
  the bound go on mid-episode from their state, exactly as well where the state adapter is
  complete (own ``get_state``, ALE, MuJoCo).
- An env no adapter knows (a plain gymnasium env) has a state only at an episode's end: its
  generators, wrappers and pending autoreset (``server/state/``, ``EpisodeEndState``), which
  its server's handshake says (``STATES_AT_EPISODE_END``). Such a server is swapped only when it
  retires, in a step where all its envs end an episode (in SAME_STEP the server takes the states
  just before the step's reset, which the fresh server makes again), never past the bound nor a
  step later (a user's reset may come between): exact in every mode. With several envs per
  server that may take long; past the bound a warning says so once.
- Envs whose state cannot be taken even there (a wrapper holding other than plain data) retire
  without states; asked again at the swap, their server's error says why. In NEXT_STEP the server
  is swapped at that end and the fresh envs are reset with ``recycle_seed(seed, recycles)`` (from
  the env's last seed: reproducible, but not the trajectory of a run without recycling; warned
  once). In SAME_STEP and DISABLED such servers are not recycled (warned once). Randomness outside
  the generators (global generators, an engine's own RNG, state kept across episodes) cannot be
  seen at all: such envs go on from their generators alone (README, Recycling).
- The first step the fresh server answers has ``info["env_recycled"] = True`` for its envs (apart
  from ``env_restarted``, which a failure sets); ``envs.stats()`` counts ``recycles`` per env.
- A spare that fails to start is stopped and started again later; after ``MAX_SPARE_FAILURES``
  in a row its server is no longer recycled (warned). A swap whose fresh server fails once the old
  one closed is restarted cold in place, then given the states (episode-end states alike): the
  envs' episodes go on, so it is not counted in ``restarts`` nor shown as ``env_restarted`` (it
  spends one of ``max_restarts`` and is in ``envs.restart_log`` as phase ``recycle``).
"""

from __future__ import annotations

import time
import warnings
from typing import Any, Optional

import numpy as np
from gymnasium.vector import AutoresetMode

from ...errors import EnvError, PortalError, ServerProtocolError
from ...wire import protocol
from ...wire.stats import SAMPLED, SAMPLED_NS
from ..contract.options import RecyclePolicy
from ..local.lockstep import SwapPlan
from ..local.recovery import RESTARTABLE, Recovery
from ..local.ring_views import RingViews
from ..local.session import PortalSession, ServerLink
from ..local.stats_reader import process_cpu
from .handover import Handover
from .spares import Spares
from .wear import SPARE_AT, Wear

OBSERVE_EVERY_S = 0.25  # how often memory and step times are read (every step counts episodes)
MAX_SPARE_FAILURES = 3
_JITTER_SALT = 0x72656379  # "recy": keeps jitter draws apart from any other use of the indices


def recycle_seed(seed: Optional[int], recycles: int) -> Optional[int]:
    """The seed a recycled env without a state is reset with: from its last seed and recycle count."""
    if seed is None:
        return None
    return int(np.random.SeedSequence([int(seed) % 2**64, _JITTER_SALT, recycles]).generate_state(1)[0])


class Recycler:
    """The recycle policy at work in one lockstep portal: wear per server, spares, swaps.

    It is handed what it works on (the session that starts and swaps runtimes, the ring views,
    recovery for seeds and for resets of envs without states) and keeps no pointer to the portal.
    """

    def __init__(
        self,
        session: PortalSession,
        ring: RingViews,
        recovery: Recovery,
        policy: RecyclePolicy,
        autoreset_mode: AutoresetMode,
        step_timeout: Optional[float],
        startup_timeout: float,
    ) -> None:
        self.session = session
        self.servers = session.servers
        self.ring = ring
        self.recovery = recovery
        self.policy = policy
        self.spares = Spares(session, fork=policy.spare == "fork")
        self.handover = Handover(self.spares, recovery, step_timeout, startup_timeout)
        self.mode = autoreset_mode
        self.server_of = np.zeros(ring.num_envs, np.int64)
        for server in self.servers:
            self.server_of[server.rows] = server.index
        self.wear = [self._new_wear(server) for server in self.servers]
        self.generations = [server.generation for server in self.servers]
        self.pids: dict[int, tuple[int, Optional[int]]] = {}  # server -> (generation, pid)
        self.recycles = [0] * ring.num_envs
        self.spare_failures = [0] * len(self.servers)
        self.due: set[int] = set()  # servers due (their spare may still be starting)
        self.warming: set[int] = set()  # servers whose spare has not said hello yet
        self.stateless: set[int] = set()  # servers whose envs have no state adapter
        self.off: set[int] = set()  # servers no longer recycled
        self.ready: list[int] = []  # servers to swap before the next step
        self.at_end: set[int] = set()  # of those, the ones whose envs all just ended an episode
        self.fresh: list[int] = []  # envs swapped before this step: ``env_recycled`` in its infos
        self.retiring: set[int] = set()  # due servers that step with CMD_RETIRE
        self.handed: dict[int, list[bytes]] = {}  # servers that retired in this step -> their states
        self.observe_at = 0.0
        self.warned: set[str] = set()

    def _new_wear(self, server: ServerLink) -> Wear:
        rng = np.random.default_rng([server.index, server.generation, _JITTER_SALT])
        return Wear(self.policy, rng)

    def _warn(self, key: str, text: str) -> None:
        if key not in self.warned:
            self.warned.add(key)
            warnings.warn(text, RuntimeWarning, stacklevel=4)

    # -- after each step: count, decide, warm spares ----------------------------------------------
    def after_step(self, k: int, infos: dict[str, Any]) -> dict[str, Any]:
        """Account for step ``k`` (its infos get ``env_recycled`` for envs swapped before it)."""
        ring = self.ring
        for i in self.fresh:  # (counted here, where the infos say so: a retired server's swap is a step ahead)
            infos = ring.add(infos, {"env_recycled": True}, i, ring.num_envs, i)
            self.recycles[i] += 1
        self.fresh = []
        ends = ring.episode_ends(k).tolist()
        changed = bool(ends) or bool(self.handed)  # what ``_mark_retiring`` reads may have moved
        ended = set(ends)
        # Servers that stepped with CMD_RETIRE, all envs at an end, and handed no states: some
        # state could not be taken (asked for again at the swap, whose error says why).
        unhanded = {
            j for j in self.retiring if j not in self.handed and all(i in ended for i in self.servers[j].env_indices)
        }
        touched = set()
        for i in ends:
            j = int(self.server_of[i])
            self.wear[j].episodes += 1
            touched.add(j)
        swapped = 0
        if self.handed:  # (after their last episodes counted: the fresh generation starts at 0)
            handed, self.handed = self.handed, {}
            for j in sorted(handed, key=lambda j: (j not in self.due, -self.wear[j].due_steps, j)):
                server = self.servers[j]
                if swapped < self.policy.max_per_step:
                    self._swap(server, k, k, True, handed[j])
                    swapped += 1
                else:  # more retired in this step than may be swapped in one: this one goes on
                    server.channel.send({"cmd": protocol.RESUME}, server.check_alive)
        now = time.monotonic()
        if now >= self.observe_at:
            self.observe_at = now + OBSERVE_EVERY_S
            self._observe()
            touched = set(range(len(self.servers)))
            changed = True
        for j in touched:
            self._classify(j, now)
        if self.warming:
            changed = self._poll_spares() or changed
        if self.due:
            self._pick(ended, self.policy.max_per_step - swapped, unhanded)
            changed = True
        if changed:
            self._mark_retiring()
        return infos

    def _mark_retiring(self) -> None:
        """The servers that step with ``CMD_RETIRE``: spare ready, states known to be there, and due
        now or once all their envs end an episode (the episode rule)."""
        servers, wear, recovery = self.servers, self.wear, self.recovery
        self.retiring = {
            j
            for j in self.spares
            if j not in self.warming
            and j not in self.stateless
            and j not in self.off
            and j not in self.ready
            and servers[j].hello.get("retire") is True  # (older servers do not know CMD_RETIRE)
            and (j in self.due or wear[j].due_after(len(servers[j].env_indices)))
            and not recovery.busy(j)
        }  # more may retire in one step than max_per_step: those past it are told to go on (RESUME)

    def retired(self, server: ServerLink, message: dict[str, Any]) -> None:
        """A server asked to retire sent its envs' states beside its step and holds (``CMD_RETIRE``)."""
        states = message.get("states")
        if (
            server.index not in self.retiring
            or message.get("held") is not True
            or not isinstance(states, list)
            or len(states) != len(server.env_indices)
            or not all(isinstance(state, bytes) for state in states)
        ):
            raise ServerProtocolError(f"{server.describe()} sent states beside a step it was not asked to retire in")
        self.handed[server.index] = states

    def _observe(self) -> None:
        """Memory and step times of every server (only what the policy's rules read)."""
        self.spares.reap()
        policy = self.policy
        if policy.rss_mb is None and policy.slowdown is None:
            return
        env_stats = self.ring.stats_views["env_stats"]
        for server in self.servers:
            j = server.index
            if j in self.off or server.generation != self.generations[j]:
                continue
            rss = process_cpu(self._pid(server))[1] if policy.rss_mb is not None else None
            rows = env_stats[server.rows]
            samples, total_ns = int(rows[:, SAMPLED].sum()), int(rows[:, SAMPLED_NS].sum())
            self.wear[j].observe(None if rss is None else rss / 2**20, max(samples, 0), max(total_ns, 0))

    def _pid(self, server: ServerLink) -> Optional[int]:
        known = self.pids.get(server.index)
        if known is None or known[0] != server.generation:
            known = (server.generation, server.handle.host_pid() if server.handle is not None else None)
            self.pids[server.index] = known
        return known[1]

    def _classify(self, j: int, now: float) -> None:
        server = self.servers[j]
        if server.generation != self.generations[j]:  # restarted after a failure: a new generation
            self.generations[j] = server.generation
            self.wear[j] = self._new_wear(server)
            self.ring.forget_samples(server.rows)
            self.due.discard(j)
        if j in self.off:
            return
        share = self.wear[j].progress(now)[0]
        if share >= SPARE_AT and j not in self.spares:
            try:
                self.spares.start(server)
                self.warming.add(j)
            except (PortalError, OSError) as exc:
                self._spare_failed(j, exc)
        if share >= 1.0:
            self.due.add(j)

    def _poll_spares(self) -> bool:
        """Take the spares' start-up messages; whether one became ready or failed."""
        changed = False
        for j in sorted(self.warming):
            try:
                if self.spares.ready(self.servers[j]):
                    self.warming.discard(j)
                    self.spare_failures[j] = 0
                    changed = True
            except (PortalError, OSError) as exc:
                self.warming.discard(j)
                self.spares.discard(self.servers[j])
                self._spare_failed(j, exc)
                changed = True
        return changed

    def _spare_failed(self, j: int, cause: BaseException) -> None:
        self.spare_failures[j] += 1
        server = self.servers[j]
        if self.spare_failures[j] >= MAX_SPARE_FAILURES:
            self._stop_recycling(j)
            warnings.warn(
                f"{server.describe()} is no longer recycled: its spare failed to start "
                f"{MAX_SPARE_FAILURES} times in a row, last: {str(cause).splitlines()[0][:300]}",
                RuntimeWarning,
                stacklevel=4,
            )

    def _stop_recycling(self, j: int) -> None:
        self.off.add(j)
        self.due.discard(j)
        self.warming.discard(j)
        self.spares.discard(self.servers[j])

    def _at_ends_only(self, j: int) -> bool:
        """Whether server ``j`` said some env of its has a state only at an episode's end: it is
        swapped only when it retires (all its envs end an episode in one step), never past the
        bound (mid-episode) nor before the step after an end (a reset may come between)."""
        hello = self.servers[j].hello or {}
        return hello.get("states") == protocol.STATES_AT_EPISODE_END and j not in self.stateless

    def _pick(self, ended: set[int], most: int, unhanded: set[int]) -> None:
        """The due servers to swap before the next step (at most ``most``: the others swapped since
        the last step count too): spare ready, envs at an end or past the bound; of servers whose
        envs have states only at episode ends, those that retired without them (``unhanded``)."""
        chosen: list[tuple[int, int]] = []
        self.at_end = set()
        for j in sorted(self.due):
            if j in self.warming or j not in self.spares or self.recovery.busy(j):
                continue
            wear = self.wear[j]
            wear.due_steps += 1
            server = self.servers[j]
            at_end = all(i in ended for i in server.env_indices)
            if self._at_ends_only(j) and j not in unhanded:
                if wear.due_steps > self.policy.wait_steps and len(server.env_indices) > 1:
                    self._warn(
                        "together",
                        f"{server.describe()} is due, but its {len(server.env_indices)} envs have a state only at "
                        f"an episode's end (no state adapter) and did not all end one in the same step within "
                        f"wait_steps={self.policy.wait_steps}: it is swapped once they do. envs_per_server=1 "
                        "swaps each env at its own episode's end; a state adapter (get_state/set_state) lets "
                        "it go mid-episode",
                    )
                continue
            if at_end:
                self.at_end.add(j)
            if at_end or (wear.due_steps > self.policy.wait_steps and j not in self.stateless):
                chosen.append((-wear.due_steps, j))
        self.ready = [j for _, j in sorted(chosen)[: max(most, 0)]]

    # -- before a step: the swaps ---------------------------------------------------------------
    def plan(self) -> Optional[SwapPlan]:
        """This step's plan: the servers swapped before they step and those that retire (None: neither)."""
        if not self.ready and not self.retiring:
            return None
        return SwapPlan(frozenset(self.ready), frozenset(self.retiring))

    def swap_ready(self, k: int, prev: int) -> None:
        """Swap the servers picked after the last step (slot ``prev``); step ``k`` goes to the fresh ones."""
        ready, self.ready = self.ready, []
        for j in ready:
            self._swap(self.servers[j], k, prev, j in self.at_end)

    def _swap(self, server: ServerLink, k: int, prev: int, at_end: bool, handed: Optional[list[bytes]] = None) -> None:
        """Swap ``server`` for its spare before step ``k``, or (``handed``: the states it retired with,
        slot ``k`` its last step) right after it: the fresh server then writes nothing into slot ``k``."""
        j, envs = server.index, server.env_indices
        closed = False
        states: Optional[list[bytes]] = handed
        if handed is None:
            try:
                states, closed = self.handover.take_states(server)
            except EnvError as exc:  # no state adapter (or a state that cannot be taken)
                states = None
                if not self._without_states(j, at_end, exc):
                    return
            except RESTARTABLE:
                return  # the old server failed: its step shows it, and recovery (or the error) takes it
        self.handover.swap(server, k, prev, states, closed, in_ring=handed is not None)
        if states is None:  # (its envs reset so in a spare, or in a cold start after a failed swap)
            seeds = [recycle_seed(self.recovery.seeds[i], self.recycles[i] + 1) for i in envs]
            self.recovery.reset_next_step(server, seeds)
        self.ring.forget_samples(server.rows)
        self.fresh.extend(envs)
        self.generations[j] = server.generation
        self.wear[j] = self._new_wear(server)
        self.due.discard(j)

    def _without_states(self, j: int, at_end: bool, cause: BaseException) -> bool:
        """Whether a server whose envs' states cannot be taken is swapped now (NEXT_STEP, all at an
        episode end)."""
        self.stateless.add(j)
        why = str(cause).splitlines()[0][:300]
        if self.mode is not AutoresetMode.NEXT_STEP:
            self._stop_recycling(j)
            self._warn(
                "off",
                f"envs whose state cannot be taken are not recycled with autoreset_mode {self.mode.value} "
                f"({why}); use NEXT_STEP, where they are reset in the fresh server with recycle_seed",
            )
            return False
        self._warn(
            "seeds",
            f"recycled envs whose state cannot be taken are reset with recycle_seed(seed, recycles) "
            f"in the fresh server: reproducible, but not the trajectory of a run without recycling ({why})",
        )
        return at_end
