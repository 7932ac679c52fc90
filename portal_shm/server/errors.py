"""What an env server tells its agent of a failure: the ERROR message naming the env and the phase
(``error_message``), and the failures of its own it names (an agent gone, a step of an ended
episode under DISABLED). Python 3.9 syntax: this runs in env runtimes."""

from __future__ import annotations

import traceback
from typing import Optional

from ..wire import protocol
from ..wire.info_codec import InfoRefused


class AgentGone(Exception):
    """The agent that owns this server has exited; the server cleans up and stops."""


def error_message(exc: BaseException, env_index: Optional[int], phase: str) -> dict:
    """The ERROR message for ``exc``, raised by env ``env_index`` (None: by no env) in ``phase``."""
    return {
        "cmd": protocol.ERROR,
        "env_index": env_index,
        "phase": phase,
        "type": type(exc).__qualname__
        if type(exc).__module__ == "builtins"
        else f"{type(exc).__module__}.{type(exc).__qualname__}",
        "message": str(exc),
        "traceback": "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)),
        **(exc.detail if isinstance(exc, InfoRefused) else {}),  # the server's own refusal: its kind, fields
    }


def ended_while_disabled(env_index: int) -> RuntimeError:
    return RuntimeError(
        f"env {env_index} ended its episode and autoreset_mode is DISABLED: "
        "call reset(options={'reset_mask': mask}) for it before stepping"
    )


def close_envs(envs: list, env_indices: list) -> Optional[dict]:
    """Close every env of ``envs`` (each even when another raised) and empty the list, which the
    server's parts share: the error message of the first that raised."""
    failure = None
    for j, env in enumerate(envs):
        try:
            env.close()
        except Exception as exc:
            failure = failure or error_message(exc, env_indices[j], "close")
    envs.clear()
    return failure
