"""How an env server steps and resets its envs one by one, each as it would in a process of its
own, writing their results into the ring (``RingWriter``). A server whose envs one native vector
env steps uses ``native_stepper.py``'s subclass instead: the server chooses once, at attach.
Python 3.9 syntax: this runs in env runtimes.
"""

from __future__ import annotations

from typing import Any, Optional

from ..wire import protocol
from ..wire.layout import EXTRA, SEQ, STATUS, STATUS_ERROR, STATUS_OK
from ..wire.schema import revive
from ..wire.stats import SAMPLE_EVERY
from .agent_link import AgentLink
from .end_states import EndStates, env_name
from .errors import ended_while_disabled, error_message
from .recording import stepping_envs
from .ring_writer import RingWriter
from .state import restore
from .stats import ServerCounters

NEXT_STEP, SAME_STEP, DISABLED = "NextStep", "SameStep", "Disabled"  # the autoreset modes
SAMPLE_MASK = SAMPLE_EVERY - 1


class Stepper:
    """Steps and resets ``envs`` (indices ``env_indices``) in autoreset mode ``mode``.

    It owns ``autoreset`` (env j's episode ended: its next step resets it), which ``ends`` reads;
    ``mailbox``: this server's row of the ring's mailbox, whose status and extra words it sets
    after each step, and whose command number (``SEQ``) says which steps are sampled (timed)."""

    def __init__(
        self,
        envs: list,
        env_indices: list,
        mode: str,
        writer: RingWriter,
        ends: EndStates,
        counters: ServerCounters,
        link: AgentLink,
        mailbox: Any,
        autoreset: list,
    ) -> None:
        self.envs = envs
        self.env_indices = env_indices
        self.mode = mode
        self.writer = writer
        self.ends = ends
        self.counters = counters
        self.link = link
        self.mailbox = mailbox
        self.words = memoryview(mailbox)  # reads one word faster than numpy indexing does
        self.autoreset = autoreset
        # What ``step`` steps: ``envs``, with ``Recorded`` stand-ins while their frames are captured.
        self.stepping = list(envs)

    def record(self, chosen: list, on: bool, rings: dict) -> None:
        """Capture the frames of envs ``chosen`` from now on (``on``), or stop (``recording.py``)."""
        self.stepping = stepping_envs(self.envs, self.stepping, chosen, self.env_indices, on, rings)
        self.counters.wrap(self.stepping)  # sampled steps of recorded envs: timed and recorded

    def step(self, k: int, actions_by_message: bool = False, retire: bool = False) -> bool:
        """Step every env with the actions of slot ``k`` and write its results into slot ``k``.

        Rewards, flags and infos lengths are gathered in lists and written with one numpy call
        each per step rather than one per env (a per-env write costs as much as the rest of
        serving a cheap env); values that numpy refuses are written again one env at a time,
        so the env that returned them is the one reported.

        ``retire`` (recycling): when every env ended its episode here, their states go beside the
        results and the server then holds (``EndStates.hold``); returns whether it sent them. In
        SAME_STEP an env whose state exists only at an episode's end (``end_only``) is captured
        just before the step resets it, its one moment. With end states asked for, the states of
        the envs whose episode ended here are due, written once the results are out
        (``EndStates.write_due``).
        """
        writer, ends, counters = self.writer, self.ends, self.counters
        writer.last_slot = k
        sampled = not self.words[SEQ] & SAMPLE_MASK  # the agent counts the steps; the server only samples
        extras: dict = {}
        errors: list = []
        mode = self.mode
        actions = None
        if actions_by_message or writer.read_action is None:
            message = self.link.recv()
            if message.get("cmd") != protocol.ACTIONS:
                raise protocol.ProtocolError(f"expected the step's actions, got {message.get('cmd')!r}")
            actions = message["actions"]
        envs, indices, autoreset, read_action, whole, check, blob = (
            counters.timed if sampled else self.stepping,
            self.env_indices,
            self.autoreset,
            writer.read_action,
            writer.whole_obs,
            writer.whole_check,
            writer.blob,
        )
        count = len(envs)
        # SAME_STEP: end_only envs' states taken before their reset
        at_end: Any = {} if retire or ends.asked else None
        rewards, terminateds, truncateds, lengths = [0.0] * count, [False] * count, [False] * count, [0] * count
        for j in range(count):
            env, i = envs[j], indices[j]
            try:
                if autoreset[j] and mode == NEXT_STEP:
                    counters.episodes[j] += 1
                    obs, info = env.reset()
                    reward, terminated, truncated = 0.0, False, False
                    infos = [info]
                else:
                    if autoreset[j] and mode == DISABLED:
                        raise ended_while_disabled(i)
                    action = read_action(k, i) if actions is None else revive(env.action_space, actions[j])
                    obs, reward, terminated, truncated, info = env.step(action)
                    infos = [info]
                    if mode == SAME_STEP and (terminated or truncated):
                        counters.episodes[j] += 1
                        if at_end is not None:
                            ends.before_reset(j, obs, at_end)
                        infos = [{"final_obs": obs, "final_info": info}]
                        obs, info = env.reset()
                        infos.append(info)
                rewards[j], terminateds[j], truncateds[j] = reward, terminated, truncated
                if whole is not None:
                    whole[k, i] = check(obs)
                    if any(infos):
                        lengths[j] = blob(k, i, infos, [], extras)
                else:
                    payload: list = []
                    writer.write(k, j, i, obs, payload)
                    if payload or any(infos):
                        lengths[j] = blob(k, i, infos, payload, extras)
                autoreset[j] = bool(terminated or truncated)
            except Exception as exc:
                # Every env steps, as each would in a process of its own; all errors are reported.
                errors.append(error_message(exc, i, "step"))
        writer.write_results(k, rewards, terminateds, truncateds, lengths, errors)
        if sampled:  # timing, and copying the counts into the ring, ride on sampled steps only
            counters.commit_sample()
        if errors:
            return self.failed(errors)
        states = ends.to_retire(at_end, extras) if retire and all(autoreset) else None
        if ends.asked and any(autoreset) and states is None:
            ends.due = (int(self.words[SEQ]), at_end)
        if states is not None:
            return self.answered(extras, {"states": states, "held": True})
        self.answered(extras)
        return False

    def failed(self, errors: list) -> bool:
        """A step in which envs raised: their error messages go to the agent, the status says ERROR."""
        self.link.send(dict(errors[0], more=errors[1:]))
        mailbox = self.mailbox
        mailbox[STATUS] = STATUS_ERROR
        mailbox[EXTRA] = 0
        return False

    def answered(self, extras: dict, more: Optional[dict] = None) -> bool:
        """A step's results are written: the infos too big for the ring (``extras``) and ``more`` go
        in one message beside them, and the status says OK; False where that message was over the
        agent's cap (an error naming the envs went instead: the status says ERROR)."""
        mailbox = self.mailbox
        if (extras or more) and not self.link.send({"cmd": protocol.EXTRA, "blobs": extras, **(more or {})}, "step"):
            mailbox[STATUS] = STATUS_ERROR
            mailbox[EXTRA] = 0
            return False
        mailbox[EXTRA] = 1 if extras or more else 0
        mailbox[STATUS] = STATUS_OK
        return True

    def reset(self, message: dict) -> tuple:
        """Reset the envs (those in the mask), or set their states (SET_STATE): the error messages
        of envs that raised, and the infos too big for the ring."""
        writer, counters = self.writer, self.counters
        k, prev = int(message["slot"]), int(message["prev_slot"])
        writer.last_slot = k
        seeds, options, mask = message.get("seeds"), message.get("options"), message.get("mask")
        states = dict(zip(message["envs"], message["states"])) if message.get("cmd") == protocol.SET_STATE else None
        # A recycled server's states: slot k already holds what they show (its predecessor wrote it).
        in_ring = message.get("in_ring") is True
        extras: dict = {}
        errors: list = []
        for j, env in enumerate(self.envs):
            i = self.env_indices[j]
            payload: list = []
            if states is not None and i in states:
                try:
                    obs, info, pending, episode_end = restore(
                        env, states[i], env_name(env), message.get("allow_pickle") is True
                    )
                    if episode_end and self.mode == SAME_STEP:
                        # Only the episode's end travelled, and this mode resets there within the
                        # step: the reset its source made (or would have made) is made here again,
                        # from the same generators, so it gives the same observation.
                        obs, info = env.reset()
                    self.autoreset[j] = pending  # a state taken at an episode's end resets at the next step
                    if in_ring:
                        if writer.obs_var:
                            writer.remember(j, obs)
                    else:
                        writer.write(k, j, i, obs, payload)
                        writer.publish(k, i, [info], payload, extras)
                except Exception as exc:
                    errors.append(error_message(exc, i, protocol.SET_STATE))
            elif states is None and (mask is None or mask[j]):
                try:
                    counters.resets[j] += 1
                    if self.autoreset[j] and self.mode != SAME_STEP:
                        counters.episodes[j] += 1  # an ended episode not autoreset yet ends here
                    obs, info = env.reset(seed=seeds[j], options=options)
                    self.autoreset[j] = False
                    writer.write(k, j, i, obs, payload)
                    writer.publish(k, i, [info], payload, extras)
                except Exception as exc:
                    errors.append(error_message(exc, i, protocol.RESET))
            else:
                writer.keep(k, prev, j, i, extras)
        return errors, extras
