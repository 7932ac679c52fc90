"""The agent's requests on its session's started envs, answered by kind on the session's thread.

Every value a request carries is checked here before it reaches the envs (env indices, the
policy's allow-lists for names, the stats window); the answers go to the agent through the
session, which numbers and frames them (``emit``, ``emit_result``). Async batches the agent sent
are counted here, so that the session's thread knows when to wait for the envs rather than for
the agent.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Optional

import numpy as np

from ...agent.vector import VectorPortal
from ...errors import HostPolicyError
from .. import messages
from ..error_data import to_data
from .policy import HostPolicy
from .request_values import check_name
from .session_envs import SessionEnvs

log = logging.getLogger("portal_shm.host")

Emit = Callable[[dict[str, Any]], None]  # a message to the agent, numbered and framed by the session
EmitResult = Callable[..., None]  # a reset's or step's result: (seq, obs, flags, infos, count, env_ids=None)


class SessionRequests:
    """What each of the agent's requests does to the session's envs (and the router's ``FINISH``)."""

    def __init__(
        self,
        envs: SessionEnvs,
        num_envs: int,
        policy: HostPolicy,
        quota: Callable[[], dict[str, Any]],
        runtime: str,
        client: str,
        emit: Emit,
        emit_result: EmitResult,
    ) -> None:
        self._envs = envs
        self._portal: VectorPortal = envs.portal
        self._num_envs = num_envs
        self._policy = policy
        self._quota = quota  # the agent key's usage against the host's limits
        self._runtime = runtime  # what the stats name the servers' runtime, never a pid or path
        self._client = client
        self._emit = emit
        self._emit_result = emit_result
        self._in_flight = 0  # envs of async batches sent and not yet shipped back
        self._handlers = self._handler_table()

    @property
    def awaiting_batch(self) -> bool:
        """Whether envs of async batches step, enough for a batch: the envs are waited for too."""
        return self._envs.batched and self._in_flight >= self._portal.batch_size

    def handle(self, cmd: str, header: dict[str, Any], arrays: list[Any]) -> None:
        if self._envs.whole and cmd in (messages.RESET, messages.SEND):  # the agent's batch is all of this host's envs
            self._whole_batch(cmd, header, arrays)
            return
        handler = self._handlers.get(cmd)
        if handler is None:
            raise ValueError(f"unknown request {cmd!r}")
        handler(header, arrays)

    def ship_batch(self) -> None:
        """The next finished async batch to the agent (an error of the envs is one, with no "re")."""
        portal = self._portal
        try:
            obs, reward, terminated, truncated, infos = portal.recv()
        except Exception as exc:
            self._in_flight = 0
            self._emit(self._error_data(exc))
            return
        ids = infos["env_id"]
        self._in_flight -= len(ids)
        self._emit_result(None, obs, (reward, terminated, truncated), infos, len(ids), env_ids=ids)

    def _error_data(self, exc: BaseException) -> dict[str, Any]:
        return to_data(exc, self._runtime)

    def _handler_table(self) -> dict[str, Any]:
        """The agent's requests (and the router's hand-over, ``FINISH``), by kind."""
        return {
            messages.RESET: self._reset,
            messages.STEP: self._step,
            messages.FINISH: self._finish,
            messages.SEND: self._send_actions,
            messages.CALL: self._call,
            messages.GET_ATTR: self._get_attr,
            messages.SET_ATTR: self._set_attr,
            messages.GET_STATE: self._get_state,
            messages.SET_STATE: self._set_state,
            messages.RECORD: self._record,
            messages.STATS: self._stats,
            messages.RENDER: self._render,
        }

    def _whole_batch(self, cmd: str, header: dict[str, Any], arrays: list[Any]) -> None:
        portal = self._portal
        if cmd == messages.RESET:
            obs, infos = portal.reset(seed=header.get("seed"), options=header.get("options"))
            self._emit({"cmd": messages.RESULT, "re": header["seq"]})
            flags: Any = (np.zeros(self._num_envs), np.zeros(self._num_envs, bool), np.zeros(self._num_envs, bool))
        else:
            ids = np.asarray(header["env_ids"], dtype=np.int64)
            if ids.tolist() != list(range(self._num_envs)):
                raise ValueError(f"env_ids {ids.tolist()} must be all {self._num_envs} envs of this host")
            obs, *flags, infos = portal.step(self._envs.actions(header, arrays, self._num_envs))
        self._emit_result(None, obs, flags, infos, self._num_envs, env_ids=range(self._num_envs))

    def _reset(self, header: dict[str, Any], arrays: list[Any]) -> None:
        seeds, options = header.get("seed"), header.get("options")
        if self._envs.batched:
            self._portal.async_reset(seed=seeds, options=options)
            self._in_flight = self._num_envs
            self._emit({"cmd": messages.RESULT, "re": header["seq"]})
            return
        obs, infos = self._portal.reset(seed=seeds, options=options)
        self._emit_result(header["seq"], obs, None, infos, self._num_envs)

    def _step(self, header: dict[str, Any], arrays: list[Any]) -> None:
        actions = self._envs.actions(header, arrays, self._num_envs)
        obs, reward, terminated, truncated, infos = self._portal.step(actions)
        self._emit_result(header["seq"], obs, (reward, terminated, truncated), infos, self._num_envs)

    def _finish(self, header: dict[str, Any], arrays: list[Any]) -> None:
        """A step the router started (``HostSession.begin_inline``) and handed over."""
        obs, reward, terminated, truncated, infos = self._portal.step_wait()
        self._emit_result(header["seq"], obs, (reward, terminated, truncated), infos, self._num_envs)

    def _send_actions(self, header: dict[str, Any], arrays: list[Any]) -> None:
        ids = np.asarray(header["env_ids"], dtype=np.int64)
        self._portal.send(self._envs.actions(header, arrays, len(ids)), ids)
        self._in_flight += len(ids)

    def _call(self, header: dict[str, Any], arrays: list[Any]) -> None:
        name, args, kwargs = self._call_name(header), header.get("args", ()), header.get("kwargs", {})
        if not isinstance(args, (list, tuple)) or not isinstance(kwargs, dict):
            raise ValueError("call: args must be a list and kwargs a dict")
        kwargs = {check_name(k, "call kwarg"): v for k, v in kwargs.items()}
        ids, portal = self._env_ids(header), self._portal
        values = portal.call(name, *args, **kwargs) if ids is None else portal.call_envs(ids, name, *args, **kwargs)
        self._emit({"cmd": messages.RESULT, "re": header["seq"], "values": list(values)})

    def _get_attr(self, header: dict[str, Any], arrays: list[Any]) -> None:
        name, ids = self._call_name(header), self._env_ids(header)
        values = self._portal.get_attr(name) if ids is None else self._portal.get_attr_envs(ids, name)
        self._emit({"cmd": messages.RESULT, "re": header["seq"], "values": list(values)})

    def _set_attr(self, header: dict[str, Any], arrays: list[Any]) -> None:
        name, ids = self._call_name(header), self._env_ids(header)
        if ids is None:
            self._portal.set_attr(name, header["values"])
        else:
            self._portal.set_attr_envs(ids, name, header["values"])
        self._emit({"cmd": messages.RESULT, "re": header["seq"]})

    def _get_state(self, header: dict[str, Any], arrays: list[Any]) -> None:
        ids = self._env_ids(header)
        if ids is None:
            raise ValueError("get_state: env_ids must name the envs")
        allow = header.get("allow_pickle") is True and self._policy.pickled_states
        self._emit(
            {"cmd": messages.RESULT, "re": header["seq"], "values": self._portal.get_state(ids, allow_pickle=allow)}
        )

    def _set_state(self, header: dict[str, Any], arrays: list[Any]) -> None:
        ids, states = self._env_ids(header), header.get("states")
        if ids is None or not isinstance(states, list) or not all(isinstance(x, bytes) for x in states):
            raise ValueError("set_state: env_ids and one state (bytes) per env")
        allow = header.get("allow_pickle") is True and self._policy.pickled_states
        obs, infos = self._portal.set_state(states, ids, allow_pickle=allow)
        self._emit_result(header["seq"], obs, None, infos, self._num_envs)

    def _record(self, header: dict[str, Any], arrays: list[Any]) -> None:
        """Allowed to every agent: it renders frames of the agent's own envs."""
        ids = self._env_ids(header)
        if ids is None:
            raise ValueError("record: env_ids must name the envs")
        self._portal.record_frames(ids, header.get("on") is True)
        self._emit({"cmd": messages.RESULT, "re": header["seq"], "values": [None] * len(ids)})

    def _stats(self, header: dict[str, Any], arrays: list[Any]) -> None:
        window = header.get("window")
        if not isinstance(window, (int, float)) or isinstance(window, bool) or not 0.1 <= window <= 3600:
            raise ValueError("stats: window must be a number of seconds in [0.1, 3600]")
        report = self._portal.stats(float(window))
        for server in report.get("servers", []):
            server["pid"] = None  # the host's own process ids are not the agent's to know
            if "runtime" in server:
                server["runtime"] = self._runtime
        report["quota"] = self._quota()
        self._emit({"cmd": messages.RESULT, "re": header["seq"], "stats": report})

    def _render(self, header: dict[str, Any], arrays: list[Any]) -> None:
        values = self._portal.render()
        self._emit({"cmd": messages.RESULT, "re": header["seq"], "values": None if values is None else list(values)})

    def _env_ids(self, header: dict[str, Any]) -> Optional[list[Any]]:
        """The envs a per-env call names (this session's own indices), checked; None: all of them."""
        ids = header.get("env_ids")
        if ids is None:
            return None
        if not (
            isinstance(ids, list)
            and ids
            and all(isinstance(i, int) and not isinstance(i, bool) and 0 <= i < self._num_envs for i in ids)
        ):
            raise ValueError(f"env_ids must be a list of this session's env indices, got {ids!r:.80}")
        return ids

    def _call_name(self, header: dict[str, Any]) -> str:
        try:
            return self._policy.check_call(
                header.get("name"), header.get("args", ()) if header["cmd"] == messages.CALL else ()
            )
        except HostPolicyError as exc:
            log.warning("refused %s: %s", self._client, exc)
            raise
