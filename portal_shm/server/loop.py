"""The env server's loop: hosts one or more envs of a runtime and steps them into the shared ring.

It wakes on its doorbell, reads actions from the ring, steps its envs and writes their results
in place, then rings the agent. How a server starts (config, env creation) is ``startup.py``.
"""

from __future__ import annotations

import fcntl
import os
import sys
import threading
import time
import traceback
from typing import Any, Callable, Optional

import numpy as np
import zmq

from ..wire import protocol as P
from ..wire import stats as S
from ..wire import trees
from ..wire.doorbell import Bell, Waiter, close_all, cores_idle, spin_until
from ..wire.end_states import MAX_STATE_BYTES, end_states_path, write_record
from ..wire.handoff import fetch_descriptors
from ..wire.info_codec import REFUSE, InfoCodec, InfoRefused
from ..wire.layout import CMD, EXTRA, SEQ, SLOT, STATUS, STATUS_ERROR, STATUS_OK, STATUS_WRITING
from ..wire.payoff import SpinPayoff
from ..wire.ring import Ring
from ..wire.schema import is_fixed, leaves, revive, space_to_schema
from .envs import get_attr, set_attr
from .native import Columns, batch_of, hosting
from .obs_check import LeafCheck, leaf_name
from .recording import check_renders, frame_rings, stepping_envs
from .sizes import cap_of, fitted
from .state import capture, carries_mid_episode, restore, warm
from .stats import ServerCounters

IDLE_CHECK_SECONDS = 0.5
HOLD_SECONDS = 10.0  # a retired server waits this long for CLOSE or RESUME (``EnvServer.hold``)
WATCHDOG_GRACE_SECONDS = 3.0
NEXT_STEP, SAME_STEP, DISABLED = "NextStep", "SameStep", "Disabled"
_SAMPLE_MASK = S.SAMPLE_EVERY - 1


class AgentGone(Exception):
    """The agent that owns this server has exited; the server cleans up and stops."""


def error_message(exc: BaseException, env_index: Optional[int], phase: str) -> dict:
    return {
        "cmd": P.ERROR,
        "env_index": env_index,
        "phase": phase,
        "type": type(exc).__qualname__
        if type(exc).__module__ == "builtins"
        else f"{type(exc).__module__}.{type(exc).__qualname__}",
        "message": str(exc),
        "traceback": "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)),
        **(exc.detail if isinstance(exc, InfoRefused) else {}),  # the server's own refusal: its kind, fields
    }


def _packable_dict(mapping: Any) -> dict:
    out = {}
    for key, value in dict(mapping or {}).items():
        try:
            P.packb(value)
        except (TypeError, ValueError, OverflowError):
            value = repr(value)
        out[str(key)] = value
    return out


def _leaf_getter(path: tuple) -> Callable[[Any], Any]:
    def get(value: Any) -> Any:
        for part in path:
            value = value[part]
        return value

    return get


def _action_reader(schema: dict, views: dict, counter: list) -> Callable[[int, int], Any]:
    """Build a function (slot, env_index) -> action with the structure of the action space."""
    kind = schema["kind"]
    if kind == "Dict":
        parts = [(key, _action_reader(sub, views, counter)) for key, sub in schema["spaces"]]
        return lambda k, i: {key: read(k, i) for key, read in parts}
    if kind == "Tuple":
        items = [_action_reader(sub, views, counter) for sub in schema["spaces"]]
        return lambda k, i: tuple(read(k, i) for read in items)
    array = views[f"act.{counter[0]}"]
    counter[0] += 1
    if array.ndim == 2:
        if array.dtype.kind == "f":
            # A scalar action of a float32 Box arrives as np.float64 (same value), which is also a
            # Python float: what an env gets from gymnasium's vector envs when the agent passes
            # float64 actions, and what APIs such as time.sleep() or math functions accept.
            return lambda k, i: np.float64(array[k, i])
        return lambda k, i: array[k, i]
    return lambda k, i: array[k, i].copy()


class EnvServer:
    """Serves the envs ``env_indices`` of one portal until the agent closes it or goes away."""

    def __init__(self, config: dict, envs: list) -> None:
        self.config = config
        self.env_indices = [int(i) for i in config["env_indices"]]
        self.envs = envs
        self.native = batch_of(envs)  # a native vector env stepping all of them (``native.py``), or None
        if self.native is not None:
            self.native.stepped = self._stepped  # type: ignore[method-assign]
        self.columns = False  # the agent reads a native batch's infos as columns (attach says)
        # What the step loop steps: ``envs``, with ``Recorded`` stand-ins while their frames are captured.
        self.stepping = list(envs)
        self.autoreset = [False] * len(envs)
        # Envs no state adapter knows: their state is taken only at an episode's end (``state.py``).
        self.end_only = [not carries_mid_episode(env) for env in envs]
        self.last_var_obs: list = [None] * len(envs)
        self.ends_due: Optional[tuple] = None  # (the step's command number, its at_end) to write after it
        self.ends: dict = {}  # env index -> [command number of the step that ended its episode, state]
        self.ends_path: Optional[str] = None
        self.ends_fd: Optional[int] = None  # open while the agent asks for end states (attach)
        self.context = zmq.Context()
        self.socket = self.context.socket(zmq.DEALER)
        self.socket.setsockopt(zmq.LINGER, 2000)
        self.socket.connect(config["control_address"])
        self.max_message = cap_of(config)  # the agent's socket drops a bigger message, and the connection
        # What the agent said of values msgpack cannot carry exactly: pickled, refused or converted
        self.info_codec = InfoCodec(config.get("infos", REFUSE))
        self._lock_fd: Optional[int] = None
        self.ring: Optional[Ring] = None
        self.go: Optional[Waiter] = None
        self.done: Optional[Bell] = None
        self.rung = False

    # -- plumbing -------------------------------------------------------------------------
    def send(self, message: dict, about: str = "", env_indices: Optional[list] = None) -> bool:
        """Send one control message; one over the agent's cap goes as an ERROR naming what was too
        big (``sizes.py``), and then False. ``about``: the command it answers; ``env_indices``: the
        envs its ``results`` belong to."""
        return self._send_packed(P.packb(message), message, about, env_indices)

    def _send_packed(self, data: bytes, message: dict, about: str, env_indices: Optional[list]) -> bool:
        refusal = fitted(data, message, self.max_message, about, env_indices or self.env_indices)
        self.socket.send(data if refusal is None else refusal, copy=False)
        return refusal is None

    def agent_alive(self) -> bool:
        """The agent holds an exclusive record lock on its lock file for as long as it lives."""
        alive, self._lock_fd = _probe_agent(self.config.get("lock_path"), self._lock_fd)
        return alive

    def recv(self) -> dict:
        while not self.socket.poll(int(IDLE_CHECK_SECONDS * 1000)):
            if not self.agent_alive():
                raise AgentGone()
        message = P.unpackb(self.socket.recv())
        if not isinstance(message, dict):
            raise P.ProtocolError("control message is not a map")
        return message

    def watch_agent(self) -> None:
        """Exit even when an env hangs (sleep, infinite loop) after the agent has died.

        The main thread notices a dead agent only between commands; this daemon thread checks
        the agent's lock every second, and when the main thread has not cleaned up within a
        grace period (it is stuck inside an env), it unlinks what the agent owned and exits.
        A hang in C code that holds the GIL cannot be helped here: ``gc`` and the agent's
        ``stop`` (kill) remain for those.
        """

        def watch() -> None:
            fd = None
            while True:
                time.sleep(1.0)
                alive, fd = _probe_agent(self.config.get("lock_path"), fd)
                if not alive:
                    time.sleep(WATCHDOG_GRACE_SECONDS)
                    self.unlink_agent_resources()
                    os._exit(0)

        threading.Thread(target=watch, name="portal-shm-agent-watchdog", daemon=True).start()

    def unlink_agent_resources(self) -> None:
        """Remove the run directory of a dead agent (it cannot any more; the ring has no name)."""
        run_dir = self.config.get("run_dir")
        if run_dir and os.path.isdir(run_dir):
            for name in os.listdir(run_dir):
                try:
                    os.unlink(os.path.join(run_dir, name))
                except OSError:
                    pass
            try:
                os.rmdir(run_dir)
            except OSError:
                pass

    # -- lifecycle ------------------------------------------------------------------------
    def handshake(self) -> None:
        first = self.envs[0]
        self.send(
            {
                "cmd": P.HELLO,
                "protocol": P.PROTOCOL_VERSION,
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
                "states": P.STATES_AT_EPISODE_END if any(self.end_only) else P.STATES_COMPLETE,
                "hosting": hosting(self.envs),
            }
        )
        attach = self.recv()
        if attach.get("cmd") != P.ATTACH:
            raise P.ProtocolError(f"expected attach, got {attach.get('cmd')!r}")
        self.autoreset_mode = attach["autoreset_mode"]
        if self.native is not None:
            self.native.configure(self.autoreset_mode)
        self.columns = attach.get("columns") is True
        # An agent that restarts failed servers exactly: every env's state at its episode's end
        # is written once the step's results are out (``write_end_states``), for a fresh server.
        if attach.get("end_states") is True and self.config.get("run_dir"):
            self.ends_path = end_states_path(self.config["run_dir"], self.config["ring_token"])
            try:
                self.ends_fd = os.open(self.ends_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            except OSError:
                pass  # a run directory it may not write (another user's): restarts end episodes
        # Agents that number their commands (``seq``) say how long to spin for the next one.
        spin = attach.get("spin")
        self.spin: Optional[float] = float(spin) if isinstance(spin, (int, float)) else None
        self.payoff = SpinPayoff(self.spin or 0.0)  # whether spinning for them pays (``wire/payoff.py``)
        segment, go, done = fetch_descriptors(attach["segment"], self.config["ring_token"], 3, timeout=30.0)
        self.go, self.done = Waiter(go), Bell(done)
        self.ring = Ring(attach["layout"], segment)
        self.ring.close_fd()
        self.bind_views(attach["observation_schema"], attach["action_schema"])
        self.send({"cmd": P.READY, "server_index": self.config["server_index"]})
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
            if not self.agent_alive():
                raise AgentGone()
        self.seq = 0  # the row was zeroed: the command that rang is its first
        self.rung = True

    def bind_views(self, obs_schema: dict, act_schema: dict) -> None:
        """Take this server's views of the attached ring (a benchmark drives a server over a ring of its own)."""
        views = self.ring.views
        self.mailbox = views["mailbox"][self.config["server_index"]]
        self._words = memoryview(self.mailbox)  # reads one word faster than numpy indexing does
        self.seq = self._words[SEQ]  # the agent's last command number: what step sampling counts
        self.obs_fixed = []
        self.obs_var = []
        for index, (path, leaf) in enumerate(leaves(obs_schema)):
            if is_fixed(leaf):
                view = views[f"obs.{index}"]  # each leaf written as SyncVectorEnv writes it (``obs_check.py``)
                check = LeafCheck(view.shape[2:], view.dtype, leaf_name(path))
                self.obs_fixed.append((_leaf_getter(path), view, check.check))
            else:
                self.obs_var.append((index, _leaf_getter(path)))
        # Actions with a variable layout (Text, Graph, custom spaces...) come as a message instead.
        self.read_action = _action_reader(act_schema, views, [0]) if is_fixed(act_schema) else None
        self.act_view = views.get("act.0")
        if self.native is not None and (self.read_action is None or "act.1" in views or self.obs_var):
            raise ValueError(f"{self.native.name} needs one fixed-layout action and observation per env")
        # The observation array itself when the observation is a single fixed-layout leaf
        # (a Box, Discrete...): the hot path then writes it without walking the tree.
        self.whole_obs = (
            self.obs_fixed[0][1]
            if len(self.obs_fixed) == 1 and not self.obs_var and leaves(obs_schema)[0][0] == ()
            else None
        )
        self.whole_check = self.obs_fixed[0][2] if self.whole_obs is not None else None
        if self.native is not None and self.whole_obs is not None:  # a native batch's: all its envs' in one array
            rows = self.whole_obs[0, self.env_indices]
            self.whole_check = LeafCheck(rows.shape, rows.dtype, batch=True).check
        first, last = self.env_indices[0], self.env_indices[-1] + 1
        self.rows: Any = slice(first, last) if self.env_indices == list(range(first, last)) else self.env_indices
        self.reward = views["reward"]
        self.terminated = views["terminated"]
        self.truncated = views["truncated"]
        self.info_len = views["info_len"]
        self.info = views["info"]
        self.info_capacity = self.info.shape[2]
        self.counters = ServerCounters(self.envs, views, self.rows, self.config["server_index"])
        self.obs_schema = obs_schema
        self.last_slot = 0
        self.ring_early = False  # this step's command asked for CMD_RING_EARLY
        self.rang_early = False  # and the server rang before writing (``_stepped``)

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
        mailbox = self.mailbox
        rung, self.rung = self.rung, False
        while True:
            if rung:  # a spare's first command, whose ring ``stand_by`` took
                rung, self.seq = False, self._words[SEQ]
            elif not self.wait_command():
                if not self.agent_alive():
                    raise AgentGone()
                self.counters.flush(time.perf_counter_ns())
                continue
            cmd = int(mailbox[CMD])
            self.ring_early, self.rang_early = bool(cmd & P.CMD_RING_EARLY), False
            cmd &= ~P.CMD_RING_EARLY
            if cmd == P.CMD_STEP or cmd == P.CMD_STEP_ACTIONS:
                self.step(int(mailbox[SLOT]), cmd == P.CMD_STEP_ACTIONS)
                if not self.rang_early:
                    self.done.ring()
                if self.ends_due is not None:
                    self.write_end_states()
            elif cmd == P.CMD_CONTROL:
                try:
                    message = self.recv()
                except P.ProtocolError as exc:
                    self.send(error_message(exc, None, "decode"))
                    continue
                if not self.control(message):
                    return
            elif cmd & P.CMD_RETIRE:
                held = self.step(int(mailbox[SLOT]), cmd & ~P.CMD_RETIRE == P.CMD_STEP_ACTIONS, retire=True)
                if not self.rang_early:
                    self.done.ring()
                if self.ends_due is not None:
                    self.write_end_states()
                if held and self.hold():
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
        if agent_gone or not self.agent_alive():  # (it may have died while the envs closed)
            self.unlink_agent_resources()
        self.socket.close(linger=0 if agent_gone else 2000)
        self.context.term()

    # -- the hot path ---------------------------------------------------------------------
    def _write(self, k: int, j: int, i: int, obs: Any, payload: list) -> None:
        for get, array, check in self.obs_fixed:
            array[k, i] = check(get(obs))
        if self.obs_var:
            payload.append(self._remember(j, obs))

    def _remember(self, j: int, obs: Any) -> dict:
        """The observation's variable-layout leaves, kept for ``_last_obs`` (also of an observation
        not written: a recycled server's, already in the ring)."""
        var = {index: get(obs) for index, get in self.obs_var}
        self.last_var_obs[j] = var
        return var

    def _publish(self, k: int, i: int, infos: list, payload: list, extras: dict) -> None:
        """Write the env's infos (and variable-layout obs) blob, spilling to ZeroMQ when big."""
        if not payload and not any(infos):
            self.info_len[k, i] = 0
            return
        self.info_len[k, i] = self._blob(k, i, infos, payload, extras)

    def _blob(self, k: int, i: int, infos: list, payload: list, extras: dict, columns: Optional[dict] = None) -> int:
        """Encode the env's infos (and variable-layout obs; and a native batch's ``columns``: the
        infos of all this server's envs) into its row, or into ``extras`` when too big for it;
        returns the length to write to ``info_len`` (-1: spilled)."""
        blob = self.info_codec.entry(i, infos, payload[0] if payload else None, columns)
        if len(blob) <= self.info_capacity:
            self.info[k, i, : len(blob)] = np.frombuffer(blob, np.uint8)
            return len(blob)
        extras[i] = blob
        return -1

    def step(self, k: int, actions_by_message: bool = False, retire: bool = False) -> bool:
        """Step every env with the actions of slot ``k`` and write its results into slot ``k``.

        Rewards, flags and infos lengths are gathered in lists and written with one numpy call
        each per step rather than one per env (a per-env write costs as much as the rest of
        serving a cheap env); values that numpy refuses are written again one env at a time,
        so the env that returned them is the one reported.

        ``retire`` (recycling): when every env ended its episode here, their states go beside the
        results and the server then holds (``hold``); returns whether it sent them. In SAME_STEP
        an env whose state exists only at an episode's end (``end_only``) is captured just
        before the step resets it, its one moment. With end states asked for (``ends_fd``), the
        states of the envs whose episode ended here are due, written once the results are out
        (``write_end_states``).
        """
        if self.native is not None and not actions_by_message:
            return self._step_native(k, retire)
        self.last_slot = k
        mailbox = self.mailbox
        sampled = not self.seq & _SAMPLE_MASK  # the agent counts the steps; the server only samples
        extras: dict = {}
        errors: list = []
        mode = self.autoreset_mode
        actions = None
        if actions_by_message or self.read_action is None:
            message = self.recv()
            if message.get("cmd") != P.ACTIONS:
                raise P.ProtocolError(f"expected the step's actions, got {message.get('cmd')!r}")
            actions = message["actions"]
        envs, indices, autoreset, read_action, whole, check = (
            self.counters.timed if sampled else self.stepping,
            self.env_indices,
            self.autoreset,
            self.read_action,
            self.whole_obs,
            self.whole_check,
        )
        count = len(envs)
        # SAME_STEP: end_only envs' states taken before their reset
        at_end: Any = {} if retire or self.ends_fd is not None else None
        rewards, terminateds, truncateds, lengths = [0.0] * count, [False] * count, [False] * count, [0] * count
        for j in range(count):
            env, i = envs[j], indices[j]
            try:
                if autoreset[j] and mode == NEXT_STEP:
                    self.counters.episodes[j] += 1
                    obs, info = env.reset()
                    reward, terminated, truncated = 0.0, False, False
                    infos = [info]
                else:
                    if autoreset[j] and mode == DISABLED:
                        raise _ended_while_disabled(i)
                    action = read_action(k, i) if actions is None else revive(env.action_space, actions[j])
                    obs, reward, terminated, truncated, info = env.step(action)
                    infos = [info]
                    if mode == SAME_STEP and (terminated or truncated):
                        self.counters.episodes[j] += 1
                        if at_end is not None and self.end_only[j]:
                            at_end[j] = self._state_before_reset(j, obs)
                        infos = [{"final_obs": obs, "final_info": info}]
                        obs, info = env.reset()
                        infos.append(info)
                rewards[j], terminateds[j], truncateds[j] = reward, terminated, truncated
                if whole is not None:
                    whole[k, i] = check(obs)
                    if any(infos):
                        lengths[j] = self._blob(k, i, infos, [], extras)
                else:
                    payload: list = []
                    self._write(k, j, i, obs, payload)
                    if payload or any(infos):
                        lengths[j] = self._blob(k, i, infos, payload, extras)
                autoreset[j] = bool(terminated or truncated)
            except Exception as exc:
                # Every env steps, as each would in a process of its own; all errors are reported.
                errors.append(error_message(exc, i, "step"))
        self._write_results(k, rewards, terminateds, truncateds, lengths, errors)
        if sampled:  # timing, and copying the counts into the ring, ride on sampled steps only
            self.counters.commit_sample()
        if errors:
            self.send(dict(errors[0], more=errors[1:]))
            mailbox[STATUS] = STATUS_ERROR
            mailbox[EXTRA] = 0
            return False
        states = self._states_to_retire(at_end, extras) if retire and all(autoreset) else None
        if self.ends_fd is not None and any(autoreset) and states is None:
            self.ends_due = (int(self._words[SEQ]), at_end)
        sent = True
        if states is not None:
            sent = self.send({"cmd": P.EXTRA, "blobs": extras, "states": states, "held": True}, "step")
        elif extras:
            sent = self.send({"cmd": P.EXTRA, "blobs": extras}, "step")
        if not sent:  # over the agent's cap: an error naming the envs went instead
            mailbox[STATUS] = STATUS_ERROR
            mailbox[EXTRA] = 0
            return False
        mailbox[EXTRA] = 1 if extras or states is not None else 0
        mailbox[STATUS] = STATUS_OK
        return states is not None

    def _step_native(self, k: int, retire: bool) -> bool:
        """``step`` of a native batch (``self.native``): all envs in one call, results written with one
        numpy call each. An error fails every env of the server (they are one native env). A batch
        keeps no states, so a ``retire`` step sends none and the server does not hold: the agent
        learns why when it asks for them at the swap, and resets the fresh server's envs."""
        self.last_slot = k
        mailbox, indices, autoreset = self.mailbox, self.env_indices, self.autoreset
        count = len(indices)
        errors: list = []
        extras: dict = {}
        lengths = [0] * count
        sampled = not self.seq & _SAMPLE_MASK
        if self.autoreset_mode == DISABLED and any(autoreset):
            i = indices[autoreset.index(True)]
            errors.append(error_message(_ended_while_disabled(i), i, "step"))
            obs = None
        else:
            start = time.perf_counter_ns() if sampled else 0
            try:
                obs, rewards, terminateds, truncateds, infos = self.native.step(self.act_rows(k))
                obs = self.whole_check(obs)
            except Exception as exc:
                errors.append(error_message(exc, indices[0], "step"))
                obs = None
            if sampled:
                share = (time.perf_counter_ns() - start) // max(count, 1)
                self.counters.pending = [share] * count
        if obs is None:
            self._write_results(k, [0.0] * count, [False] * count, [False] * count, lengths, errors)
            self.send(dict(errors[0], more=errors[1:]))
            mailbox[STATUS] = STATUS_ERROR
            mailbox[EXTRA] = 0
            return False
        self._stepped()  # (where the batch did not say so as its native call returned)
        self.whole_obs[k, self.rows] = obs
        same_step = self.autoreset_mode == SAME_STEP
        episodes = self.counters.episodes
        for j in range(count):
            if autoreset[j] and not same_step:
                episodes[j] += 1
        if isinstance(infos, Columns):
            if self.columns:  # one blob for all: in the first env's row, beside its own infos
                for j, own in infos.extras.items():
                    if j:
                        lengths[j] = self._blob(k, indices[j], own, [], extras)
                lengths[0] = self._blob(k, indices[0], infos.extras.get(0, []), [], extras, dict(infos))
                infos = None
            else:
                infos = infos.per_env(count)
        for j in range(count if infos is not None else 0):
            if any(infos[j]):
                lengths[j] = self._blob(k, indices[j], infos[j], [], extras)
        ended = terminateds | truncateds
        if same_step:
            for j in np.flatnonzero(ended):
                episodes[j] += 1
        self.autoreset = ended.tolist()
        self._write_results(k, rewards, terminateds, truncateds, lengths, errors)
        if sampled:
            self.counters.commit_sample()
        if extras and not self.send({"cmd": P.EXTRA, "blobs": extras}, "step"):
            mailbox[STATUS] = STATUS_ERROR  # over the agent's cap: an error naming the envs went instead
            mailbox[EXTRA] = 0
            return False
        mailbox[EXTRA] = 1 if extras else 0
        mailbox[STATUS] = STATUS_OK
        return False

    def _stepped(self) -> None:
        """A native batch stepped and its results are written next: an agent that asked for it
        (``CMD_RING_EARLY``) is rung now, with the status WRITING, so that its wake-up overlaps
        the writing (it then watches the status word, ``spin.wait_written``). Lockstep agents ask,
        whose servers' cores are free once their step is done (async batches would watch on a
        core that the other servers need: Pong in batches of 8, 0.90x); and only while the
        machine has a core for it."""
        if self.ring_early and cores_idle():
            self.mailbox[STATUS] = STATUS_WRITING
            self.done.ring()
            self.ring_early, self.rang_early = False, True

    def act_rows(self, k: int) -> np.ndarray:
        """This server's actions of slot ``k``, as one array (a native batch's)."""
        return self.act_view[k, self.rows]

    def hold(self) -> bool:
        """After sending its states (``CMD_RETIRE``): whether to close, as the agent answers.

        Until the answer the server reads only its control socket, never the mailbox row, which
        the agent may already have given its spare. CLOSE: it closes its envs (True); RESUME (the
        agent swaps fewer servers in one step than retired): it serves on (False). An agent that
        says nothing within ``HOLD_SECONDS`` let it go.
        """
        deadline = time.monotonic() + HOLD_SECONDS
        while not self.socket.poll(int(IDLE_CHECK_SECONDS * 1000)):
            if not self.agent_alive() or time.monotonic() > deadline:
                self._close_envs()
                return True
        message = P.unpackb(self.socket.recv())
        if isinstance(message, dict) and message.get("cmd") == P.RESUME:
            return False
        self._close_envs()
        return True

    def _states_to_retire(self, at_end: dict, extras: dict) -> Optional[list]:
        """Every env's state at its episode's end (``at_end``: those taken before a SAME_STEP
        reset), or None where one could not be taken (a wrapper's state that is not plain data)
        or they would not fit one message beside the step's infos (``extras``): the agent then
        asks for them, and learns why, the way it does of an older server."""
        try:
            states = [self._state_at_end(j, at_end) for j in range(len(self.envs))]
        except Exception:
            return None
        if None in states:
            return None
        carried = sum(map(len, states)) + sum(map(len, extras.values()))
        return None if carried + 1024 + 16 * len(states) > self.max_message else states

    def _state_at_end(self, j: int, at_end: dict) -> Optional[bytes]:
        """Env ``j``'s state after the step that ended its episode, taken where a fresh server
        restoring it resumes as this one would: SAME_STEP's ``end_only`` envs before their reset
        (``at_end``, None if it could not be taken), every other env now."""
        if self.end_only[j] and self.autoreset_mode == SAME_STEP:
            return at_end.get(j)
        return self._capture(j, False)

    def write_end_states(self) -> None:
        """After a step's results are out (its doorbell rung): the states of the envs whose episode
        ended in it, stamped with its command number, into this server's file (``wire/end_states.py``:
        the agent reads it if this server fails; ``_state_at_end``). Taken here, the cost is off the
        step's path (the agent is busy with the batch meanwhile). An env whose state cannot be
        taken (a wrapper holding what is not plain data) is left out: its restart ends its episode
        instead. Called only with states due (``ends_due``)."""
        (seq, at_end), self.ends_due = self.ends_due, None
        ends = self.ends
        for j, ended in enumerate(self.autoreset):
            if not ended:
                continue
            try:
                state = self._state_at_end(j, at_end)
            except Exception:
                state = None
            if state is not None and len(state) <= MAX_STATE_BYTES:
                ends[self.env_indices[j]] = [seq, state]
        if ends:
            try:
                write_record(self.ends_fd, P.packb({"ends": ends}))
            except OSError:
                pass  # (a full disk): this server's restarts end episodes

    def _state_before_reset(self, j: int, obs: Any) -> Optional[bytes]:
        """SAME_STEP: env ``j``'s state at the end of the episode its step just ended, before the
        step resets it (restored, the reset is made again: ``reset``); None if it cannot be taken."""
        env = self.envs[j]
        try:
            if self.native is not None:
                raise env.refuse("the state")
            return capture(env, env_name(env), obs, None, False, True, episode_end=True)
        except Exception:
            return None

    def _capture(self, j: int, allow_pickle: bool) -> bytes:
        env = self.envs[j]
        if self.native is not None:
            raise env.refuse("the state")
        pending = self.autoreset[j]  # its episode ended: the next step resets it (SAME_STEP: it did)
        at_end = pending and self.autoreset_mode != SAME_STEP
        return capture(env, env_name(env), self._last_obs(j), None, allow_pickle, pending, episode_end=at_end)

    def _write_results(
        self, k: int, rewards: list, terminateds: list, truncateds: list, lengths: list, errors: list
    ) -> None:
        rows = self.rows
        self.info_len[k, rows] = lengths
        try:
            self.reward[k, rows] = rewards
            self.terminated[k, rows] = terminateds
            self.truncated[k, rows] = truncateds
        except Exception:
            for j, i in enumerate(self.env_indices):
                try:
                    self.reward[k, i] = rewards[j]
                    self.terminated[k, i] = terminateds[j]
                    self.truncated[k, i] = truncateds[j]
                except Exception as exc:
                    errors.append(error_message(exc, i, "step"))

    # -- control messages -----------------------------------------------------------------
    def control(self, message: dict) -> bool:
        """Handle one control message; False once the server should stop."""
        cmd = message.get("cmd")
        env_index = None
        try:
            if cmd == P.RESET or cmd == P.SET_STATE:
                errors = self.reset(message)
                if errors:
                    self.send(dict(errors[0], more=errors[1:]))
                else:
                    self.send({"cmd": P.REPLY, "extras": self._reset_extras}, str(cmd))
            elif cmd == P.CALL:
                results = []
                for j in self._chosen(message):
                    env_index = self.env_indices[j]
                    attr = get_attr(self.envs[j], message["name"])
                    results.append(attr(*message["args"], **message["kwargs"]) if callable(attr) else attr)
                self._reply_results(results, message["name"], message)
            elif cmd == P.SET_ATTR:
                for value, j in zip(message["values"], self._chosen(message)):
                    env_index = self.env_indices[j]
                    set_attr(self.envs[j], message["name"], value)
                self.send({"cmd": P.REPLY})
            elif cmd == P.GET_STATE:
                results = []
                allow_pickle = message.get("allow_pickle") is True
                for j in self._chosen(message):
                    env_index = self.env_indices[j]
                    results.append(self._capture(j, allow_pickle))
                closing = message.get("then_close") is True  # recycling: the states, then this server goes
                self._reply_results(results, "get_state", message, {"closed": True} if closing else None)
                if closing:
                    self._close_envs()
                    return False
            elif cmd == P.RECORD:
                on, chosen = message.get("on") is True, self._chosen(message)
                for j in chosen if on else ():
                    env_index = self.env_indices[j]
                    check_renders(self.envs[j], env_index)
                rings = frame_rings(message, chosen) if on else {}  # frame rings handed over (a local agent's)
                self.stepping = stepping_envs(self.envs, self.stepping, chosen, self.env_indices, on, rings)
                self.counters.wrap(self.stepping)  # sampled steps of recorded envs: timed and recorded
                self.send({"cmd": P.REPLY})
            elif cmd == P.RENDER:
                results = []
                for j, env in enumerate(self.envs):
                    env_index = self.env_indices[j]
                    results.append(env.render())
                self._reply_results(results, "render", message)
            elif cmd == P.CLOSE:
                # Close every env even when one raises, then stop: the agent is closing anyway.
                failure = self._close_envs()
                self.send(failure or {"cmd": P.REPLY})
                return False
            else:
                raise P.ProtocolError(f"unknown control command {cmd!r}")
        except Exception as exc:
            self.send(error_message(exc, env_index, str(cmd)))
        return True

    def _last_obs(self, j: int) -> Any:
        """Env ``j``'s observation as it last wrote it into the ring (and beside it)."""
        i, k, var = self.env_indices[j], self.last_slot, self.last_var_obs[j] or {}
        fixed = {
            index: self.ring.views[f"obs.{index}"]
            for index, (_, leaf) in enumerate(leaves(self.obs_schema))
            if is_fixed(leaf)
        }
        return trees.unflatten(
            (
                fixed[index][k, i].copy() if index in fixed else var.get(index)
                for index in range(len(leaves(self.obs_schema)))
            ),
            self.obs_schema,
        )

    def _chosen(self, message: dict) -> list:
        """Positions of the envs a call names (``envs``: their indices; all of this server's by default)."""
        envs = message.get("envs")
        if envs is None:
            return list(range(len(self.envs)))
        return [self.env_indices.index(i) for i in envs]

    def _close_envs(self) -> Optional[dict]:
        """Close every env (each even when another raised); the error message of the first that raised."""
        failure = None
        for j, env in enumerate(self.envs):
            try:
                env.close()
            except Exception as exc:
                failure = failure or error_message(exc, self.env_indices[j], "close")
        self.envs = []
        return failure

    def _reply_results(self, results: list, name: str, asked: dict, extra: Optional[dict] = None) -> None:
        """Send the results of the command ``asked`` (one per env it names)."""
        reply = {"cmd": P.REPLY, "results": results, **(extra or {})}
        try:
            data = P.packb(reply)
        except (TypeError, ValueError, OverflowError) as exc:
            raise TypeError(f"the result of {name!r} cannot be sent to the agent: {exc}") from None
        about = f"call({name!r})" if asked.get("cmd") == P.CALL else f"{name}()"
        self._send_packed(data, reply, about, [self.env_indices[j] for j in self._chosen(asked)])

    def reset(self, message: dict) -> list:
        """Reset the envs (those in the mask); returns the error messages of envs that raised."""
        k, prev = int(message["slot"]), int(message["prev_slot"])
        self.last_slot = k
        seeds, options, mask = message.get("seeds"), message.get("options"), message.get("mask")
        states = dict(zip(message["envs"], message["states"])) if message.get("cmd") == P.SET_STATE else None
        # A recycled server's states: slot k already holds what they show (its predecessor wrote it).
        in_ring = message.get("in_ring") is True
        self._reset_extras = {}
        errors: list = []
        if self.native is not None and states is None:
            self._reset_native(k, prev, seeds, mask, errors)
            return errors
        for j, env in enumerate(self.envs):
            i = self.env_indices[j]
            payload: list = []
            if states is not None and i in states:
                try:
                    obs, info, pending, episode_end = restore(
                        env, states[i], env_name(env), message.get("allow_pickle") is True
                    )
                    if episode_end and self.autoreset_mode == SAME_STEP:
                        # Only the episode's end travelled, and this mode resets there within the
                        # step: the reset its source made (or would have made) is made here again,
                        # from the same generators, so it gives the same observation.
                        obs, info = env.reset()
                    self.autoreset[j] = pending  # a state taken at an episode's end resets at the next step
                    if in_ring:
                        if self.obs_var:
                            self._remember(j, obs)
                    else:
                        self._write(k, j, i, obs, payload)
                        self._publish(k, i, [info], payload, self._reset_extras)
                except Exception as exc:
                    errors.append(error_message(exc, i, P.SET_STATE))
            elif states is None and (mask is None or mask[j]):
                try:
                    self.counters.resets[j] += 1
                    if self.autoreset[j] and self.autoreset_mode != SAME_STEP:
                        self.counters.episodes[j] += 1  # an ended episode not autoreset yet ends here
                    obs, info = env.reset(seed=seeds[j], options=options)
                    self.autoreset[j] = False
                    self._write(k, j, i, obs, payload)
                    self._publish(k, i, [info], payload, self._reset_extras)
                except Exception as exc:
                    errors.append(error_message(exc, i, P.RESET))
            else:
                for _, array, _ in self.obs_fixed:
                    array[k, i] = array[prev, i]
                if self.obs_var:
                    payload.append(self.last_var_obs[j])
                self._publish(k, i, [], payload, self._reset_extras)
        return errors

    def _reset_native(self, k: int, prev: int, seeds: list, mask: Optional[list], errors: list) -> None:
        """``reset`` of a native batch: the envs in the mask in one call; the others keep their
        observation (copied from slot ``prev``), as ``reset`` does for plain envs."""
        chosen = [j for j in range(len(self.envs)) if mask is None or mask[j]]
        if not chosen:
            return
        try:
            obs, infos = self.native.reset(np.array(chosen), [seeds[j] for j in chosen])
            obs = self.whole_check(obs)
        except Exception as exc:
            errors.append(error_message(exc, self.env_indices[chosen[0]], P.RESET))
            return
        rows, whole = self.rows, self.whole_obs
        whole[k, rows] = obs
        for position, j in enumerate(chosen):
            i = self.env_indices[j]
            self.counters.resets[j] += 1
            if self.autoreset[j] and self.autoreset_mode != SAME_STEP:
                self.counters.episodes[j] += 1
            self.autoreset[j] = False
            self._publish(k, i, [infos[position]], [], self._reset_extras)
        for j, i in enumerate(self.env_indices):
            if mask is not None and not mask[j]:
                whole[k, i] = whole[prev, i]
                self._publish(k, i, [], [], self._reset_extras)


def _ended_while_disabled(env_index: int) -> RuntimeError:
    return RuntimeError(
        f"env {env_index} ended its episode and autoreset_mode is DISABLED: "
        "call reset(options={'reset_mask': mask}) for it before stepping"
    )


def _probe_agent(path: Optional[str], fd: Optional[int]) -> tuple:
    """(agent alive?, descriptor to reuse): free lock or vanished lock file means gone."""
    if not path:
        return True, fd
    if fd is None:
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            return False, None
    try:
        fcntl.lockf(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError:
        return True, fd
    fcntl.lockf(fd, fcntl.LOCK_UN)
    return False, fd


def env_name(env: Any) -> str:
    """What a state names its env by: the registered id, else the base env's class."""
    spec = getattr(env, "spec", None)
    if spec is not None and getattr(spec, "id", None):
        return str(spec.id)
    base = getattr(env, "unwrapped", env)
    return f"{type(base).__module__}:{type(base).__qualname__}"
