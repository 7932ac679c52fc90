"""How an env server steps and resets envs that one native vector env hosts (``native.py``'s
``NativeBatch``): all of them in one call, results written with one numpy call each; and how it
rings its agent as soon as that call returns, where the agent asked (``EarlyRing``).
Python 3.9 syntax: this runs in env runtimes.
"""

from __future__ import annotations

import time
from typing import Any, Optional

import numpy as np

from ..wire import protocol
from ..wire.doorbell import Bell, cores_idle
from ..wire.layout import SEQ, STATUS, STATUS_WRITING
from .errors import ended_while_disabled, error_message
from .native import Columns, NativeBatch
from .stepper import DISABLED, SAME_STEP, SAMPLE_MASK, Stepper


class EarlyRing:
    """Rings the agent as soon as a native batch has stepped, before the server writes the results,
    where the step's command asked (``CMD_RING_EARLY``): the server's loop sets ``asked`` with each
    command and rings after the results unless this ``rang``. ``words``: the server's mailbox row;
    ``bell``: its doorbell to the agent."""

    def __init__(self, words: Any, bell: Optional[Bell]) -> None:
        self.words = words
        self.bell = bell
        self.asked = False  # this step's command asked for CMD_RING_EARLY
        self.rang = False  # and the server rang before writing

    def stepped(self) -> None:
        """A native batch stepped and its results are written next: an agent that asked for it
        (``CMD_RING_EARLY``) is rung now, with the status WRITING, so that its wake-up overlaps
        the writing (it then watches the status word, ``spin.wait_written``). Lockstep agents ask,
        whose servers' cores are free once their step is done (async batches would watch on a
        core that the other servers need: Pong in batches of 8, 0.90x); and only while the
        machine has a core for it."""
        if self.asked and cores_idle():
            self.words[STATUS] = STATUS_WRITING
            self.bell.ring()
            self.asked, self.rang = False, True


class NativeStepper(Stepper):
    """A ``Stepper`` of the envs of ``batch``. ``columns``: the agent reads the batch's infos as
    columns (attach says); ``early``: told as the batch's native call returns (``NativeBatch.listen``)."""

    def __init__(self, batch: NativeBatch, columns: bool, early: EarlyRing, **parts: Any) -> None:
        super().__init__(**parts)
        writer = self.writer
        if writer.read_action is None or not writer.single_action or writer.obs_var:
            raise ValueError(f"{batch.name} needs one fixed-layout action and observation per env")
        self.batch = batch
        self.columns = columns
        self.stepped = early.stepped
        batch.listen(early.stepped)

    def step(self, k: int, actions_by_message: bool = False, retire: bool = False) -> bool:
        """``Stepper.step`` of a native batch: all envs in one call, results written with one numpy
        call each. An error fails every env of the server (they are one native env). A batch keeps
        no states, so a ``retire`` step sends none and the server does not hold: the agent learns
        why when it asks for them at the swap, and resets the fresh server's envs."""
        if actions_by_message:
            return super().step(k, actions_by_message, retire)
        writer, counters = self.writer, self.counters
        writer.last_slot = k
        indices, autoreset = self.env_indices, self.autoreset
        count = len(indices)
        errors: list = []
        extras: dict = {}
        lengths = [0] * count
        sampled = not self.words[SEQ] & SAMPLE_MASK
        if self.mode == DISABLED and any(autoreset):
            i = indices[autoreset.index(True)]
            errors.append(error_message(ended_while_disabled(i), i, "step"))
            obs = None
        else:
            start = time.perf_counter_ns() if sampled else 0
            try:
                obs, rewards, terminateds, truncateds, infos = self.batch.step(writer.act_rows(k))
                obs = writer.whole_check(obs)
            except Exception as exc:
                errors.append(error_message(exc, indices[0], "step"))
                obs = None
            if sampled:
                share = (time.perf_counter_ns() - start) // max(count, 1)
                counters.pending = [share] * count
        if obs is None:
            writer.write_results(k, [0.0] * count, [False] * count, [False] * count, lengths, errors)
            return self.failed(errors)
        self.stepped()  # (where the batch did not say so as its native call returned)
        writer.whole_obs[k, writer.rows] = obs
        same_step = self.mode == SAME_STEP
        episodes = counters.episodes
        for j in range(count):
            if autoreset[j] and not same_step:
                episodes[j] += 1
        blob = writer.blob
        if isinstance(infos, Columns):
            if self.columns:  # one blob for all: in the first env's row, beside its own infos
                for j, own in infos.extras.items():
                    if j:
                        lengths[j] = blob(k, indices[j], own, [], extras)
                lengths[0] = blob(k, indices[0], infos.extras.get(0, []), [], extras, dict(infos))
                infos = None
            else:
                infos = infos.per_env(count)
        for j in range(count if infos is not None else 0):
            if any(infos[j]):
                lengths[j] = blob(k, indices[j], infos[j], [], extras)
        ended = terminateds | truncateds
        if same_step:
            for j in np.flatnonzero(ended):
                episodes[j] += 1
        autoreset[:] = ended.tolist()
        writer.write_results(k, rewards, terminateds, truncateds, lengths, errors)
        if sampled:
            counters.commit_sample()
        self.answered(extras)
        return False

    def reset(self, message: dict) -> tuple:
        """``Stepper.reset`` of a native batch: the envs in the mask in one call; the others keep
        their observation (copied from slot ``prev_slot``), as ``Stepper.reset`` does for plain envs.
        SET_STATE goes to ``Stepper.reset``, whose envs refuse it (a batch keeps no states)."""
        if message.get("cmd") == protocol.SET_STATE:
            return super().reset(message)
        writer, counters, autoreset = self.writer, self.counters, self.autoreset
        k, prev = int(message["slot"]), int(message["prev_slot"])
        writer.last_slot = k
        seeds, mask = message.get("seeds"), message.get("mask")
        extras: dict = {}
        chosen = [j for j in range(len(self.envs)) if mask is None or mask[j]]
        if not chosen:
            return [], extras
        try:
            obs, infos = self.batch.reset(np.array(chosen), [seeds[j] for j in chosen])
            obs = writer.whole_check(obs)
        except Exception as exc:
            return [error_message(exc, self.env_indices[chosen[0]], protocol.RESET)], extras
        whole = writer.whole_obs
        whole[k, writer.rows] = obs
        for position, j in enumerate(chosen):
            i = self.env_indices[j]
            counters.resets[j] += 1
            if autoreset[j] and self.mode != SAME_STEP:
                counters.episodes[j] += 1
            autoreset[j] = False
            writer.publish(k, i, [infos[position]], [], extras)
        for j, i in enumerate(self.env_indices):
            if mask is not None and not mask[j]:
                whole[k, i] = whole[prev, i]
                writer.publish(k, i, [], [], extras)
        return [], extras
