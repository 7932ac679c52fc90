"""The states of an env server's envs at their episodes' ends: for an agent that restarts failed
servers exactly (written to this server's end-states file after each step, ``wire/end_states.py``)
and for recycling (sent beside a ``CMD_RETIRE`` step's results, after which the server holds).

An env that no state adapter knows (``end_only``, ``state.carries_mid_episode``) has a state only at
an episode's end: in SAME_STEP it is taken just before the step resets it, its one moment.
Python 3.9 syntax: this runs in env runtimes.
"""

from __future__ import annotations

import os
from typing import Any, Callable, Optional

from ..wire import protocol
from ..wire.end_states import MAX_STATE_BYTES, end_states_path, write_record
from .agent_link import AgentLink
from .errors import close_envs
from .state import capture

HOLD_SECONDS = 10.0  # a retired server waits this long for CLOSE or RESUME (``EndStates.hold``)


class EndStates:
    """End states of ``envs``. ``autoreset``: the stepper's flags (env j's episode ended: its next
    step resets it), read here, never written; ``last_obs(j)``: env j's observation as last written
    (``RingWriter.last_obs``); ``fd``: the end-states file, when the agent asks for them (attach)."""

    def __init__(
        self,
        envs: list,
        env_indices: list,
        end_only: list,
        autoreset: list,
        same_step: bool,
        last_obs: Callable[[int], Any],
        link: AgentLink,
        batch: bool,
        fd: Optional[int],
    ) -> None:
        self.envs = envs
        self.env_indices = env_indices
        self.end_only = end_only
        self.autoreset = autoreset
        self.same_step = same_step
        self.last_obs = last_obs
        self.link = link
        self.batch = batch  # a native batch keeps no per-env states (``native.BatchMember.refuse``)
        self.fd = fd
        self.asked = fd is not None
        self.due: Optional[tuple] = None  # (the step's command number, its at_end) to write after it
        self.ends: dict = {}  # env index -> [command number of the step that ended its episode, state]

    def before_reset(self, j: int, obs: Any, at_end: dict) -> None:
        """SAME_STEP, env ``j``'s episode just ended in a step, which resets it next: an ``end_only``
        env's state is taken now, into ``at_end`` (None if it cannot be taken; restored, the reset
        is made again: ``Stepper.reset``)."""
        if not self.end_only[j]:
            return
        env = self.envs[j]
        try:
            if self.batch:
                raise env.refuse("the state")
            at_end[j] = capture(env, env_name(env), obs, None, False, True, episode_end=True)
        except Exception:
            at_end[j] = None

    def to_retire(self, at_end: dict, extras: dict) -> Optional[list]:
        """Every env's state at its episode's end (``at_end``: those taken before a SAME_STEP
        reset), or None where one could not be taken (a wrapper's state that is not plain data)
        or they would not fit one message beside the step's infos (``extras``): the agent then
        asks for them, and learns why, the way it does of an older server."""
        try:
            states = [self._at_end(j, at_end) for j in range(len(self.envs))]
        except Exception:
            return None
        if None in states:
            return None
        carried = sum(map(len, states)) + sum(map(len, extras.values()))
        return None if carried + 1024 + 16 * len(states) > self.link.max_message else states

    def _at_end(self, j: int, at_end: dict) -> Optional[bytes]:
        """Env ``j``'s state after the step that ended its episode, taken where a fresh server
        restoring it resumes as this one would: SAME_STEP's ``end_only`` envs before their reset
        (``at_end``, None if it could not be taken), every other env now."""
        if self.end_only[j] and self.same_step:
            return at_end.get(j)
        return self.capture(j, False)

    def write_due(self) -> None:
        """After a step's results are out (its doorbell rung): the states of the envs whose episode
        ended in it, stamped with its command number, into this server's file (``wire/end_states.py``:
        the agent reads it if this server fails; ``_at_end``). Taken here, the cost is off the
        step's path (the agent is busy with the batch meanwhile). An env whose state cannot be
        taken (a wrapper holding what is not plain data) is left out: its restart ends its episode
        instead. Called only with states due (``due``)."""
        (seq, at_end), self.due = self.due, None
        ends = self.ends
        for j, ended in enumerate(self.autoreset):
            if not ended:
                continue
            try:
                state = self._at_end(j, at_end)
            except Exception:
                state = None
            if state is not None and len(state) <= MAX_STATE_BYTES:
                ends[self.env_indices[j]] = [seq, state]
        if ends:
            try:
                write_record(self.fd, protocol.packb({"ends": ends}))
            except OSError:
                pass  # (a full disk): this server's restarts end episodes

    def capture(self, j: int, allow_pickle: bool) -> bytes:
        """Env ``j``'s state now (``get_state``)."""
        env = self.envs[j]
        if self.batch:
            raise env.refuse("the state")
        pending = self.autoreset[j]  # its episode ended: the next step resets it (SAME_STEP: it did)
        at_end = pending and not self.same_step
        return capture(env, env_name(env), self.last_obs(j), None, allow_pickle, pending, episode_end=at_end)

    def hold(self) -> bool:
        """After sending its states (``CMD_RETIRE``): whether to close, as the agent answers.

        Until the answer the server reads only its control socket, never the mailbox row, which
        the agent may already have given its spare. CLOSE: it closes its envs (True); RESUME (the
        agent swaps fewer servers in one step than retired): it serves on (False). An agent that
        says nothing within ``HOLD_SECONDS`` let it go.
        """
        message = self.link.answer_within(HOLD_SECONDS)
        if isinstance(message, dict) and message.get("cmd") == protocol.RESUME:
            return False
        close_envs(self.envs, self.env_indices)
        return True


def open_file(run_dir: Optional[str], ring_token: Any) -> tuple:
    """(path, descriptor) of this server's end-states file in the agent's run directory; the
    descriptor is None where it cannot be written (another user's): restarts end episodes."""
    if not run_dir:
        return None, None
    path = end_states_path(run_dir, ring_token)
    try:
        return path, os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    except OSError:
        return path, None


def env_name(env: Any) -> str:
    """What a state names its env by: the registered id, else the base env's class."""
    spec = getattr(env, "spec", None)
    if spec is not None and getattr(spec, "id", None):
        return str(spec.id)
    base = getattr(env, "unwrapped", env)
    return f"{type(base).__module__}:{type(base).__qualname__}"
