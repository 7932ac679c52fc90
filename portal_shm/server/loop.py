"""The env server's loop: hosts one or more envs of a runtime and steps them into the shared ring.

It wakes on its doorbell, reads actions from the ring, steps its envs and writes their results
in place, then rings the agent. ``EnvServer`` is the loop and the handshake, over parts it owns:
the control socket (``agent_link.py``), the ring writer (``ring_writer.py``), a stepper chosen once
at attach (``stepper.py``, or ``native_stepper.py`` for a native vector env), end states
(``end_states.py``) and the control commands (``commands.py``). How a server starts (config, env
creation) is ``startup.py``.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any, Optional

import numpy as np

from ..version import __version__
from ..wire.doorbell import Bell, Waiter, close_all, spin_until
from ..wire.handoff import fetch_descriptors
from ..wire.info_codec import REFUSE, InfoCodec
from ..wire.layout import CMD, SEQ, SLOT
from ..wire.payoff import SpinPayoff
from ..wire.protocol import (
    ATTACH,
    CMD_CONTROL,
    CMD_RETIRE,
    CMD_RING_EARLY,
    CMD_STEP,
    CMD_STEP_ACTIONS,
    HELLO,
    PROTOCOL_VERSION,
    READY,
    STATES_AT_EPISODE_END,
    STATES_COMPLETE,
    ProtocolError,
    packb,
)
from ..wire.ring import Ring
from ..wire.schema import space_to_schema
from .agent_link import IDLE_CHECK_SECONDS, WATCHDOG_GRACE_SECONDS, AgentLink
from .agent_link import probe_agent as _probe_agent
from .commands import Commands
from .end_states import HOLD_SECONDS, EndStates, env_name, open_file
from .errors import AgentGone, error_message
from .native import batch_of, hosting
from .native_stepper import EarlyRing, NativeStepper
from .ring_writer import RingWriter
from .state import carries_mid_episode, warm
from .stats import ServerCounters
from .stepper import DISABLED, NEXT_STEP, SAME_STEP, Stepper

__all__ = [
    "DISABLED",
    "HOLD_SECONDS",
    "IDLE_CHECK_SECONDS",
    "NEXT_STEP",
    "SAME_STEP",
    "WATCHDOG_GRACE_SECONDS",
    "AgentGone",
    "EnvServer",
    "_probe_agent",
    "env_name",
    "error_message",
]


class EnvServer:
    """Serves the envs ``env_indices`` of one portal until the agent closes it or goes away.

    ``mailbox`` (this server's row of the ring's mailbox) and ``done`` (its doorbell to the agent)
    are its own: an env runs in the server's process, and hostile test envs find them on the stack
    (``example_envs.hostile.own_server``)."""

    def __init__(self, config: dict, envs: list) -> None:
        self.config = config
        self.env_indices = [int(i) for i in config["env_indices"]]
        self.hosting = hosting(envs)
        self.envs = list(envs)  # shared by the parts; emptied once closed (``errors.close_envs``)
        self.native = batch_of(envs)  # a native vector env stepping all of them (``native.py``), or None
        # Envs no state adapter knows: their state is taken only at an episode's end (``state``).
        self.end_only = [not carries_mid_episode(env) for env in envs]
        self.link = AgentLink(config, self.env_indices)
        # What the agent said of values msgpack cannot carry exactly: pickled, refused or converted
        self.info_codec = InfoCodec(config.get("infos", REFUSE))
        self.commands = Commands(self.envs, self.env_indices, self.link)  # with a stepper once attached
        self.autoreset_mode = NEXT_STEP  # as the agent attaches (a benchmark sets it)
        self.columns = False  # the agent reads a native batch's infos as columns (attach says)
        self.ends_path: Optional[str] = None
        self.ends_fd: Optional[int] = None  # open while the agent asks for end states (attach)
        self.spin: Optional[float] = None
        self.payoff = SpinPayoff(0.0)
        self.ring: Optional[Ring] = None
        self.go: Optional[Waiter] = None
        self.done: Optional[Bell] = None
        self.rung = False

    def watch_agent(self) -> None:
        """Exit even when an env hangs after the agent has died (``AgentLink.watch``)."""
        self.link.watch()

    def handshake(self) -> None:
        first = self.envs[0]
        self.link.send(
            {
                "cmd": HELLO,
                "protocol": PROTOCOL_VERSION,
                "version": __version__,
                "server_index": self.config["server_index"],
                "pid": os.getpid(),
                "python": sys.version.split()[0],
                "numpy": np.__version__,
                "observation_spaces": [space_to_schema(env.observation_space) for env in self.envs],
                "action_spaces": [space_to_schema(env.action_space) for env in self.envs],
                "metadata": _packable_dict(getattr(first, "metadata", {})),
                "render_mode": getattr(first, "render_mode", None),
                "standby": True,  # it can be attached as a spare before its swap (``stand_by``)
                "retire": True,  # it knows CMD_RETIRE
                "ring_early": True,  # and CMD_RING_EARLY
                "states": STATES_AT_EPISODE_END if any(self.end_only) else STATES_COMPLETE,
                "hosting": self.hosting,
            }
        )
        attach = self.link.recv()
        if attach.get("cmd") != ATTACH:
            raise ProtocolError(f"expected attach, got {attach.get('cmd')!r}")
        self.autoreset_mode = attach["autoreset_mode"]
        if self.native is not None:
            self.native.configure(self.autoreset_mode)
        self.columns = attach.get("columns") is True
        # An agent that restarts failed servers exactly: every env's state at its episode's end
        # is written once the step's results are out (``EndStates.write_due``), for a fresh server.
        if attach.get("end_states") is True:
            self.ends_path, self.ends_fd = open_file(self.config.get("run_dir"), self.config["ring_token"])
        # Agents that number their commands (``seq``) say how long to spin for the next one.
        spin = attach.get("spin")
        self.spin = float(spin) if isinstance(spin, (int, float)) else None
        self.payoff = SpinPayoff(self.spin or 0.0)  # whether spinning for them pays (``wire/payoff.py``)
        segment, go, done = fetch_descriptors(attach["segment"], self.config["ring_token"], 3, timeout=30.0)
        self.go, self.done = Waiter(go), Bell(done)
        self.ring = Ring(attach["layout"], segment)
        self.ring.close_fd()
        self.bind_views(attach["observation_schema"], attach["action_schema"])
        self.link.send({"cmd": READY, "server_index": self.config["server_index"]})
        if attach.get("standby") is True:
            self.stand_by()

    def stand_by(self) -> None:
        """A spare attached ahead of its swap (recycling) keeps off the ring until it is rung.

        Its mailbox row still belongs to the server it is to replace, whose commands it must not
        take: it sleeps on its own doorbell, which the agent rings only once that server is gone
        and the row zeroed for it (``PortalSession.swap``). The swap then costs no attach round trip.
        Meanwhile it reads what restoring its envs' states reads of the runtime (``state.warm``).
        """
        warm(self.envs)
        while not self.go.wait(IDLE_CHECK_SECONDS):
            if not self.link.alive():
                raise AgentGone()
        self.seq = 0  # the row was zeroed: the command that rang is its first
        self.rung = True

    def bind_views(self, obs_schema: dict, act_schema: dict) -> None:
        """Take this server's views of the attached ring and choose its stepper (a benchmark drives
        a server over a ring of its own: it sets ``ring`` and ``autoreset_mode``, then calls this)."""
        views, indices, native = self.ring.views, self.env_indices, self.native
        self.mailbox = views["mailbox"][self.config["server_index"]]
        self._words = memoryview(self.mailbox)  # reads one word faster than numpy indexing does
        self.seq = self._words[SEQ]  # the agent's last command number
        self.writer = RingWriter(views, obs_schema, act_schema, indices, self.info_codec, native is not None)
        self.counters = ServerCounters(self.envs, views, self.writer.rows, self.config["server_index"])
        autoreset = [False] * len(self.envs)
        self.ends = EndStates(
            self.envs,
            indices,
            self.end_only,
            autoreset,
            self.autoreset_mode == SAME_STEP,
            self.writer.last_obs,
            self.link,
            native is not None,
            self.ends_fd,
        )
        self.early = EarlyRing(self.mailbox, self.done)
        parts: Any = {
            "envs": self.envs,
            "env_indices": indices,
            "mode": self.autoreset_mode,
            "writer": self.writer,
            "ends": self.ends,
            "counters": self.counters,
            "link": self.link,
            "mailbox": self.mailbox,
            "autoreset": autoreset,
        }
        self.stepper = Stepper(**parts) if native is None else NativeStepper(native, self.columns, self.early, **parts)
        self.step = self.stepper.step  # what the loop calls, bound once
        self.commands = Commands(self.envs, indices, self.link, self.stepper, self.ends)

    def control(self, message: dict) -> bool:
        """Handle one control message; False once the server should stop (``commands.py``)."""
        return self.commands.handle(message)

    def wait_command(self) -> bool:
        """True once the agent posted a command, False after ``IDLE_CHECK_SECONDS`` without one.

        An agent that numbers its commands bumps ``seq`` before it rings: the server spins on that
        word for up to ``spin`` seconds while the agent's commands have been coming that soon
        (``payoff``), then sleeps on its pipe, where a ring without a new ``seq`` is one it already
        answered while spinning. For an agent that does not, every ring is a command.
        """
        if self.spin is None:
            return self.go.wait(IDLE_CHECK_SECONDS)
        words, seq, payoff = self._words, self.seq, self.payoff
        start = None
        if payoff.worth_it():
            hit = spin_until(lambda: words[SEQ] != seq, self.spin, only_idle=False)
            payoff.spun(hit)
            if hit:
                self.go.skipped()
                self.seq = words[SEQ]
                return True
        elif self.spin > 0:
            start = time.perf_counter()
        while words[SEQ] == seq:
            if not self.go.wait(IDLE_CHECK_SECONDS):
                return False
        if start is not None:
            payoff.slept(time.perf_counter() - start)
        self.seq = words[SEQ]
        return True

    def serve_forever(self) -> None:
        mailbox, step, early, done, ends = self.mailbox, self.step, self.early, self.done, self.ends
        rung, self.rung = self.rung, False
        while True:
            if rung:  # a spare's first command, whose ring ``stand_by`` took
                rung, self.seq = False, self._words[SEQ]
            elif not self.wait_command():
                if not self.link.alive():
                    raise AgentGone()
                self.counters.flush(time.perf_counter_ns())
                continue
            cmd = int(mailbox[CMD])
            early.asked, early.rang = bool(cmd & CMD_RING_EARLY), False
            cmd &= ~CMD_RING_EARLY
            if cmd == CMD_STEP or cmd == CMD_STEP_ACTIONS:
                step(int(mailbox[SLOT]), cmd == CMD_STEP_ACTIONS)
                if not early.rang:
                    done.ring()
                if ends.due is not None:
                    ends.write_due()
            elif cmd == CMD_CONTROL:
                try:
                    message = self.link.recv()
                except ProtocolError as exc:
                    self.link.send(error_message(exc, None, "decode"))
                    continue
                if not self.commands.handle(message):
                    return
            elif cmd & CMD_RETIRE:
                held = step(int(mailbox[SLOT]), cmd & ~CMD_RETIRE == CMD_STEP_ACTIONS, True)
                if not early.rang:
                    done.ring()
                if ends.due is not None:
                    ends.write_due()
                if held and ends.hold():
                    return

    def cleanup(self, agent_gone: bool) -> None:
        """Release everything; when the agent died, also unlink what it can no longer unlink."""
        for env in self.envs:
            try:
                env.close()
            except Exception:
                pass
        close_all((self.go, self.done))
        if self.ends_fd is not None:
            os.close(self.ends_fd)
            try:
                os.unlink(self.ends_path)
            except OSError:
                pass
        if self.ring is not None:
            self.ring.close()
        self.link.close(agent_gone)


def _packable_dict(mapping: Any) -> dict:
    out = {}
    for key, value in dict(mapping or {}).items():
        try:
            packb(value)
        except (TypeError, ValueError, OverflowError):
            value = repr(value)
        out[str(key)] = value
    return out
