"""An env server's control commands (reset, call, attributes, states, recording, render, close),
dispatched by a table as the env host dispatches its agents' requests. Each answers the agent
once: a REPLY, or an ERROR naming the env that raised. Python 3.9 syntax: this runs in env runtimes.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

from ..wire import protocol
from .agent_link import AgentLink
from .end_states import EndStates
from .envs import get_attr, set_attr
from .errors import close_envs, error_message
from .recording import check_renders, frame_rings
from .stepper import Stepper


class Commands:
    """The commands of the server of ``envs`` (indices ``env_indices``), answered on ``link``.
    ``stepper`` and ``ends`` exist once the server attached to a ring: before, what needs them
    is refused."""

    def __init__(
        self,
        envs: list,
        env_indices: list,
        link: AgentLink,
        stepper: Optional[Stepper] = None,
        ends: Optional[EndStates] = None,
    ) -> None:
        self.envs = envs
        self.env_indices = env_indices
        self.link = link
        self.stepper = stepper
        self.ends = ends
        self.env_index: Optional[int] = None  # the env the command is at: the one an error names
        self.handlers: dict = {
            protocol.RESET: self._reset,
            protocol.SET_STATE: self._reset,
            protocol.CALL: self._call,
            protocol.SET_ATTR: self._set_attr,
            protocol.GET_STATE: self._get_state,
            protocol.RECORD: self._record,
            protocol.RENDER: self._render,
            protocol.CLOSE: self._close,
        }

    def handle(self, message: dict) -> bool:
        """Handle one control message; False once the server should stop."""
        cmd = message.get("cmd")
        self.env_index = None
        try:
            handler: Optional[Callable[[dict], bool]] = self.handlers.get(cmd) if isinstance(cmd, str) else None
            if handler is None:
                raise protocol.ProtocolError(f"unknown control command {cmd!r}")
            return handler(message)
        except Exception as exc:
            self.link.send(error_message(exc, self.env_index, str(cmd)))
            return True

    def _attached(self) -> Any:
        if self.stepper is None or self.ends is None:
            raise protocol.ProtocolError("a command of the ring before the server attached to one")
        return self.stepper, self.ends

    def _reset(self, message: dict) -> bool:
        stepper, _ = self._attached()
        errors, extras = stepper.reset(message)
        if errors:
            self.link.send(dict(errors[0], more=errors[1:]))
        else:
            self.link.send({"cmd": protocol.REPLY, "extras": extras}, str(message.get("cmd")))
        return True

    def _call(self, message: dict) -> bool:
        results = []
        for j in self._chosen(message):
            self.env_index = self.env_indices[j]
            attr = get_attr(self.envs[j], message["name"])
            results.append(attr(*message["args"], **message["kwargs"]) if callable(attr) else attr)
        self._reply_results(results, message["name"], message)
        return True

    def _set_attr(self, message: dict) -> bool:
        for value, j in zip(message["values"], self._chosen(message)):
            self.env_index = self.env_indices[j]
            set_attr(self.envs[j], message["name"], value)
        self.link.send({"cmd": protocol.REPLY})
        return True

    def _get_state(self, message: dict) -> bool:
        _, ends = self._attached()
        results = []
        allow_pickle = message.get("allow_pickle") is True
        for j in self._chosen(message):
            self.env_index = self.env_indices[j]
            results.append(ends.capture(j, allow_pickle))
        closing = message.get("then_close") is True  # recycling: the states, then this server goes
        self._reply_results(results, "get_state", message, {"closed": True} if closing else None)
        if closing:
            close_envs(self.envs, self.env_indices)
        return not closing

    def _record(self, message: dict) -> bool:
        stepper, _ = self._attached()
        on, chosen = message.get("on") is True, self._chosen(message)
        for j in chosen if on else ():
            self.env_index = self.env_indices[j]
            check_renders(self.envs[j], self.env_index)
        rings = frame_rings(message, chosen) if on else {}  # frame rings handed over (a local agent's)
        stepper.record(chosen, on, rings)
        self.link.send({"cmd": protocol.REPLY})
        return True

    def _render(self, message: dict) -> bool:
        results = []
        for j, env in enumerate(self.envs):
            self.env_index = self.env_indices[j]
            results.append(env.render())
        self._reply_results(results, "render", message)
        return True

    def _close(self, message: dict) -> bool:
        # Close every env even when one raises, then stop: the agent is closing anyway.
        failure = close_envs(self.envs, self.env_indices)
        self.link.send(failure or {"cmd": protocol.REPLY})
        return False

    def _chosen(self, message: dict) -> list:
        """Positions of the envs a call names (``envs``: their indices; all of this server's by default)."""
        envs = message.get("envs")
        if envs is None:
            return list(range(len(self.envs)))
        return [self.env_indices.index(i) for i in envs]

    def _reply_results(self, results: list, name: str, asked: dict, extra: Optional[dict] = None) -> None:
        """Send the results of the command ``asked`` (one per env it names)."""
        reply = {"cmd": protocol.REPLY, "results": results, **(extra or {})}
        try:
            data = protocol.packb(reply)
        except (TypeError, ValueError, OverflowError) as exc:
            raise TypeError(f"the result of {name!r} cannot be sent to the agent: {exc}") from None
        about = f"call({name!r})" if asked.get("cmd") == protocol.CALL else f"{name}()"
        self.link.send_packed(data, reply, about, [self.env_indices[j] for j in self._chosen(asked)])
