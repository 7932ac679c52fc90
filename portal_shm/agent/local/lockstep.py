"""Lockstep driver: every env steps (or resets) in the same ring slot, and the agent waits for all.

One step: the actions go into slot ``k`` (or, for spaces without a fixed layout, one message per
server), each server gets ``STEP k`` in its mailbox and a ring on its doorbell, and the agent
waits on the servers in order, batching each one's infos as soon as it is done. The slot moves
round the ring, so a batch handed out stays valid for ``ring_depth - 1`` further calls.

The failure policy (``failure.py``) says what a failed server's step becomes: an error, or (with
``on_env_failure="restart"``) rows the agent makes (``recovery.py``); the driver only says where
a server failed.
"""

from __future__ import annotations

import time
from typing import Any, NamedTuple, Optional, Protocol

import numpy as np
from gymnasium.spaces import Space
from gymnasium.vector.utils import iterate

from ...errors import EnvError, PortalError, PortalTimeoutError, ServerProtocolError
from ...wire import protocol
from ...wire.doorbell import spin_until
from ...wire.layout import EXTRA, STATUS, STATUS_ERROR, STATUS_PENDING, STATUS_WRITING
from ...wire.payoff import SpinPayoff
from ..contract.failure import repairing
from ..contract.infos import add_info
from ..contract.restarts import restart_infos
from ..contract.validate import check_blobs
from .control import POLL_SLICE
from .health import Health
from .recovery import RESTARTABLE, Recovery
from .replies import ControlCalls
from .ring_views import RingViews
from .session import ServerLink
from .spin import wait_written

Batch = tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]


class SwapPlan(NamedTuple):
    """What a recycler plans for the next step: the servers it swaps before they step (the others
    step meanwhile) and the servers that step with ``CMD_RETIRE`` (their states come back at their
    envs' episode end)."""

    swapping: frozenset[int]
    retiring: frozenset[int]


class StepRecycler(Protocol):
    """What the step asks of a recycler (``agent/recycle``): its plan, the swap, and what to do
    with a retired server's states and with the step's infos."""

    def plan(self) -> Optional[SwapPlan]: ...

    def swap_ready(self, k: int, prev: int) -> None: ...

    def retired(self, server: ServerLink, message: dict[str, Any]) -> None: ...

    def after_step(self, k: int, infos: dict[str, Any]) -> dict[str, Any]: ...


class NotFinished(PortalError):
    """A step finished by a driver that may never wait (``Lockstep.no_wait``) found a server
    not finished after all: its status word went back, or the message it promised is not there. An
    honest server never does that, so the driver ends the step's session instead of waiting."""


class Lockstep:
    """Steps and resets all envs of a portal together; owns the ring slot they are in."""

    def __init__(
        self,
        servers: list[ServerLink],
        ring: RingViews,
        recovery: Recovery,
        health: Health,
        calls: ControlCalls,
        action_space: Space[Any],
        *,
        copy: bool,
        spin_wait: float,
        loose_actions: bool,
        recycler: Optional[StepRecycler] = None,
    ) -> None:
        """``loose_actions``: a batch of actions that does not fit the ring's layout travels as a
        message instead of raising (AsyncVectorEnv hands each env its element, whatever its shape).
        ``recycler``: asked for its plan before each step (``agent/recycle``)."""
        self.servers = servers
        self.ring = ring
        self.recovery = recovery
        self.health = health
        self.calls = calls
        self.action_space = action_space
        self.copy = copy
        self.spin_wait = spin_wait
        self.payoff = SpinPayoff(spin_wait)  # whether spinning for the servers' results pays (``spin.py``)
        self.loose_actions = loose_actions
        self.step_timeout = recovery.step_timeout
        self.recycler = recycler
        self.slot = -1
        self.posted: tuple[int, Optional[list[dict[str, Any]]]] = (
            protocol.CMD_STEP,
            None,
        )  # the step's command, actions
        self.step_seqs: dict[int, int] = {}  # server -> command number of its part of the step
        self.no_wait = False  # set by a driver that may never wait: a wait raises ``NotFinished`` instead
        #: The control sockets of servers whose message ``step_finished`` found not there yet.
        self.awaited: list[Any] = []

    def _next_slot(self) -> int:
        """The slot the next call writes; with ``copy=False``, a client still holding its views
        from ``ring_depth`` calls ago is reported first (``kept_views``)."""
        ring = self.ring
        private = ring.private
        k = private.free_after(self.slot) if private is not None else None
        if k is None:
            k = (self.slot + 1) % ring.ring_depth
        if not self.copy:
            ring.kept.check(k)
        ring.previous[k] = max(self.slot, 0)
        return k

    # -- reset -------------------------------------------------------------------------------
    def reset(self, seeds: list[Optional[int]], options: Optional[dict[str, Any]], mask: Optional[np.ndarray]) -> None:
        k, prev = self._next_slot(), max(self.slot, 0)
        self.recovery.note_reset(seeds, mask)
        messages = []
        for server in self.servers:
            envs = server.env_indices
            messages.append(
                {
                    "cmd": protocol.RESET,
                    "slot": k,
                    "prev_slot": prev,
                    "seeds": [seeds[i] for i in envs],
                    "options": options,
                    "mask": None if mask is None else [bool(mask[i]) for i in envs],
                }
            )
        self.calls.send(messages)
        self.slot = k
        self._prepare(k)

    def restore(self, states: dict[int, bytes], allow_pickle: bool) -> tuple[Any, dict[str, Any]]:
        """Restore the envs ``states`` names (env index -> state) into a new slot and wait for it; the
        others keep their observation there, as in a masked reset (every server writes its rows)."""
        k, prev = self._next_slot(), max(self.slot, 0)
        messages = []
        for server in self.servers:
            envs = [i for i in server.env_indices if i in states]
            messages.append(
                {
                    "cmd": protocol.SET_STATE,
                    "slot": k,
                    "prev_slot": prev,
                    "envs": envs,
                    "states": [states[i] for i in envs],
                    "allow_pickle": allow_pickle,
                }
            )
        self.calls.send(messages)
        self.slot = k
        return self.reset_result(None, "set_state")

    def reset_result(self, timeout: Optional[float], what: str = "reset") -> tuple[Any, dict[str, Any]]:
        """The observations and infos of ``reset`` (or of ``restore``: ``what``)."""
        k = self.slot
        extras, _, errors, failed = self.calls.replies(what, timeout)
        # -- recovery: restart failed servers and repeat the reset for their envs --
        for server, cause in failed.items():
            extras.update(self.recovery.retry_reset(server, self.calls.messages[server.index], cause))
        if errors:
            self.health.raise_env_errors(errors, fatal=what == "reset")
        infos = self.ring.gather(k, extras, {})
        # the restarts this reset shows: its own, and those of servers it covers whose envs did not show theirs
        for index, restarted in self.recovery.reset_infos().items():
            for i, info in restarted.items():
                infos = add_info(infos, info, i, self.ring.num_envs)
            self.recovery.shown(index, "reset")
        return self.ring.observations(k, self.copy), infos

    # -- step --------------------------------------------------------------------------------
    def step(self, actions: Any) -> None:
        k = self._next_slot()
        cmd = protocol.CMD_STEP
        messages = None
        if self.ring.actions is None:
            messages = self._action_messages(actions)
        else:
            try:
                self.ring.write_actions(k, actions)
            except (ValueError, TypeError):
                if not self.loose_actions:
                    raise
                # e.g. [0, 1, 2] for three Box(0, 1, (1,)) envs: such a batch travels as a message.
                messages = self._action_messages(actions)
        prev, self.slot = self.slot, k
        if messages is not None:
            cmd = protocol.CMD_STEP_ACTIONS
        self.posted = (cmd, messages)
        plan = self.recycler.plan() if self.recycler is not None else None
        owing: list[ServerLink] = []
        for server in self.servers:
            if server.owed is not None:  # a fresh server restoring states: posted once it answered
                owing.append(server)
            elif plan is None or server.index not in plan.swapping:
                flag = protocol.CMD_RETIRE if plan is not None and server.index in plan.retiring else 0
                self._post_step(server, cmd | flag, k, messages)
        for server in owing:
            self._post_step(server, cmd, k, messages)
        if plan is not None and plan.swapping:
            # The others step while due servers are swapped (their round trips hidden behind those
            # steps); the fresh servers then step the same slot.
            assert self.recycler is not None
            self.recycler.swap_ready(k, prev)
            for server in self.servers:
                if server.index in plan.swapping:
                    self._post_step(server, cmd, k, messages)
        self._prepare(k)

    def _prepare(self, k: int) -> None:
        """While the servers write slot ``k``: drop what the caller wrote into its private arrays
        when it last had them (``PrivateSlots.prepare``), work ``hand_out`` would do after the wait."""
        if self.copy and self.ring.private is not None:
            self.ring.private.prepare(k)

    def _post_step(self, server: ServerLink, cmd: int, k: int, messages: Optional[list[dict[str, Any]]]) -> None:
        if server.owed is not None:  # (before its actions message too: a restart gives it a new channel)
            server.settle()
        if messages is not None:
            server.channel.send(messages[server.index], server.check_alive)
        recovery = self.recovery
        if (recovery.resetting or recovery.ended) and recovery.begin_step(server, k):
            return  # a restarted server's envs: reset instead of step, or end the episode
        server.post(cmd, k, pending=True, early=self.spin_wait > 0)
        self.step_seqs[server.index] = server.seq

    def _action_messages(self, actions: Any) -> list[dict[str, Any]]:
        """Actions without a fixed layout: one message per server, each env's action as msgpack."""
        per_env = list(iterate(self.action_space, actions))
        if len(per_env) != self.ring.num_envs:
            raise ValueError(f"got {len(per_env)} actions for {self.ring.num_envs} envs")
        messages = [
            {"cmd": protocol.ACTIONS, "actions": [per_env[i] for i in server.env_indices]} for server in self.servers
        ]
        for message in messages:
            protocol.packb(message)  # raises TypeError naming an unsendable value before any server is told
        return messages

    def step_result(self, timeout: Optional[float]) -> Batch:
        timeout = self.step_timeout if timeout is None else timeout
        deadline = None if timeout is None else time.monotonic() + timeout
        k = self.slot
        extras: dict[int, bytes] = {}
        infos: dict[str, Any] = {}
        errors: list[EnvError] = []
        recovery = self.recovery
        failed: list[tuple[ServerLink, Optional[BaseException]]] = []
        redoable: set[int] = set()  # failed in a plain step: may be made again from episode-end states
        # Servers own ascending env ranges: batching each one's infos as soon as it is done
        # keeps env order (as gymnasium's) and hides the work behind the slower servers.
        for server in self.servers:
            try:
                if recovery.failed_early and server.index in recovery.failed_early:
                    failed.append((server, recovery.failed_early.pop(server.index)))
                    continue
                if recovery.ended and server.index in recovery.ended:
                    failed.append((server, None))
                    continue
                if recovery.resetting and server.index in recovery.resetting:
                    extras.update(recovery.finish_reset(server, timeout))
                else:
                    self._wait_done(server, deadline)
                    if server.mailbox[STATUS] == STATUS_ERROR or server.mailbox[EXTRA]:
                        server_errors = self._step_message(server, timeout, extras)
                        if server_errors:  # (the policy may restart the server for one instead)
                            errors.extend(recovery.step_errors(server_errors))
                if not errors:
                    infos = self.ring.gather(k, extras, infos, server.env_indices)
            except RESTARTABLE as exc:
                if recovery.handles(exc):
                    failed.append((server, repairing(exc)))
                    redoable.add(server.index)
                elif isinstance(exc, EnvError):
                    errors.append(exc)
                else:
                    raise
        # -- recovery: restart failed servers; make the step again, or end their envs' episodes --
        for server, cause in failed:
            if cause is not None and server.index in redoable:
                states = recovery.redo_states(server, self.step_seqs.get(server.index, -1))
                if states is not None:
                    try:
                        infos = self._redo(server, k, states, cause, timeout, infos)
                        continue
                    except RESTARTABLE as exc:  # the fresh server failed the step as well
                        cause = exc
            infos = recovery.end_episodes(server, k, infos, cause)
        if errors:
            self.health.raise_env_errors(errors)
        if self.recycler is not None:
            infos = self.recycler.after_step(k, infos)
        reward, terminated, truncated = self.ring.results(k, self.copy)
        return self.ring.observations(k, self.copy), reward, terminated, truncated, infos

    def _redo(
        self,
        server: ServerLink,
        k: int,
        states: dict[int, bytes],
        cause: BaseException,
        timeout: Optional[float],
        infos: dict[str, Any],
    ) -> dict[str, Any]:
        """Restart ``server`` (failed in step ``k``, right after all its envs ended an episode), put
        its envs back at those ends and make step ``k`` again with the same actions (still in the
        slot): the step gives what the failed server would have, and shows the restart."""
        recovery = self.recovery
        recovery.restart(server, cause)
        server.channel.send(
            {
                "cmd": protocol.SET_STATE,
                "slot": k,
                "prev_slot": self.ring.previous[k],
                "envs": list(states),
                "states": list(states.values()),
                "allow_pickle": False,
                "in_ring": True,  # the step about to be made again writes the slot
            },
            server.check_alive,
        )
        server.post_control()
        server.expect(protocol.REPLY, timeout, "restore of a restarted env")
        cmd, messages = self.posted
        if messages is not None:
            server.channel.send(messages[server.index], server.check_alive)
        server.post(cmd, k, pending=True, early=self.spin_wait > 0)
        self.step_seqs[server.index] = server.seq
        self._wait_done(server, None if timeout is None else time.monotonic() + timeout)
        extras: dict[int, bytes] = {}
        if server.mailbox[STATUS] == STATUS_ERROR or server.mailbox[EXTRA]:
            errors = self._step_message(server, timeout, extras)
            if errors:
                raise errors[0]
        infos = self.ring.gather(k, extras, infos, server.env_indices)
        for i, info in restart_infos(server.env_indices, cause, {}).items():
            infos = add_info(infos, info, i, self.ring.num_envs)
        recovery.shown(server.index, "step")
        return infos

    def _step_message(self, server: ServerLink, timeout: Optional[float], extras: dict[int, bytes]) -> list[EnvError]:
        """The message a server sent beside its step: its env errors, or infos blobs into ``extras``
        (and, from a server retired at its envs' episode end, their states for the recycler)."""
        if self.no_wait and not server.channel.ready():
            raise NotFinished(f"{server.describe()} said a message follows its step and has not sent it")
        message = server.recv(timeout, "step")
        if message["cmd"] == protocol.ERROR:
            return server.errors(message)
        if message["cmd"] == protocol.EXTRA:
            extras.update(check_blobs(message.get("blobs"), server.env_indices, server.describe()))
            if "states" in message and self.recycler is not None:
                self.recycler.retired(server, message)
            return []
        raise ServerProtocolError(f"{server.describe()} sent {message['cmd']!r:.40} during a step")

    def _wait_done(self, server: ServerLink, deadline: Optional[float]) -> None:
        """Wait until ``server`` finished (status OK or ERROR): spin a while, then sleep on its pipe
        (whose rings may be left from steps seen while spinning: the status word is the truth). A
        ring with the status WRITING came early (``CMD_RING_EARLY``): the results follow at once."""
        words, payoff = server.mailbox, self.payoff
        if words[STATUS] < STATUS_PENDING:
            return
        if self.no_wait:
            raise NotFinished(f"{server.describe()} set its status back to busy after it had finished its step")
        start = None
        if payoff.worth_it():
            hit = spin_until(lambda: words[STATUS] < STATUS_PENDING, self.spin_wait)
            payoff.spun(hit)
            if hit:
                server.done.skipped()
                return
        else:
            start = time.perf_counter()
        done = server.done
        check_at = time.monotonic() + POLL_SLICE
        while True:
            if done.wait(POLL_SLICE):
                if words[STATUS] == STATUS_WRITING:
                    self._wait_written(server, deadline)
                if words[STATUS] < STATUS_PENDING:
                    if start is not None:
                        payoff.slept(time.perf_counter() - start)
                    return
            now = time.monotonic()
            if now >= check_at:
                self._check_waiting(server, deadline)
                check_at = now + POLL_SLICE

    def _wait_written(self, server: ServerLink, deadline: Optional[float]) -> None:
        """``server`` rang early (its status WRITING): its results follow at once. (Apart from
        ``_wait_done``, whose every call would otherwise make cells for what these closures hold.)"""
        words = server.mailbox
        wait_written(lambda: words[STATUS] != STATUS_WRITING, lambda: self._check_waiting(server, deadline))

    def _check_waiting(self, server: ServerLink, deadline: Optional[float]) -> None:
        """Raise if ``server`` died or let ``deadline`` pass while the agent waits for its step."""
        server.check_alive()
        if deadline is not None and time.monotonic() > deadline:
            raise PortalTimeoutError(
                f"{server.describe()} did not finish its step within {self.step_timeout} s (step_timeout): "
                "hung or too slow"
            )

    # -- for a driver outside the portal's thread ----------------------------------------------
    # An env host's router drives lockstep steps of many tenants on one thread: nothing here may
    # wait on what a server (an env runs in it) controls. ``step_finished`` only reads the status
    # words and the control socket; ``step_result`` with ``no_wait`` set then finishes the step,
    # raising ``NotFinished`` where a server went back on what they said.
    def step_finished(self, readable: Any) -> Optional[bool]:
        """After ``step``: whether every server finished and what it promised beside its
        results is there, once the rings of the done pipes whose fds are in ``readable`` are read.
        None: ``step_result`` must finish it (a pipe closed, or a server failed and the restart policy
        has work to do). Never waits: a server still writing (it rang early) or whose message is
        still on its way is not finished yet.

        Each ring is read as it comes: a pipe left readable would wake the caller's poll again at
        once, and it would spin until the slowest server finished, on the cores the servers need.
        The status words, not the rings, say who finished.
        """
        finished = True
        awaited = self.awaited
        awaited.clear()
        for server in self.servers:
            done = server.done
            if done.fd in readable:
                done.take()
                if done.closed:
                    return None
            words = server.mailbox
            status = words[STATUS]
            if status >= STATUS_PENDING:  # (WRITING among them: rings early only when asked, never here)
                finished = False
            elif status == STATUS_ERROR and self.recovery.repairs:
                return None  # a restart takes seconds: the caller's thread, not the driver's
            elif (status == STATUS_ERROR or words[EXTRA]) and not server.channel.ready():
                finished = False
                awaited.append(server.channel.socket)
        return finished
