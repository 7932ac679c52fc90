"""Control messages measured against the agent's cap before they are sent.

The agent's control socket takes messages of up to ``MAX_MESSAGE_BYTES`` (or the cap its config
names); ZeroMQ drops a bigger one together with the connection and tells neither side, so an
agent waiting for it would wait forever. A server therefore measures each message it packed, and
one over the cap is not sent: an ERROR goes in its place that names what was too big (an env's
infos, the reply to a call...), its size and the cap. Its kind is ``message-too-big``: the env did
not crash and a restart would meet the same value, so the agent raises it instead of restarting.
"""

from __future__ import annotations

from typing import Any, Optional

from ..wire.protocol import ERROR, EXTRA, KIND_MESSAGE_TOO_BIG, MAX_MESSAGE_BYTES, packb

CONFIG_KEY = "max_message_bytes"
ERROR_TYPE = "MessageTooBig"
HINT = (
    "send large arrays as observations (they travel through shared memory, not as messages), "
    "shrink them, or put fewer envs on one server (envs_per_server)"
)
CLIPPED_TEXT = 64 * 1024  # what an oversized error report keeps of each text it carries


def cap_of(config: dict) -> int:
    """The agent's cap on one message (its config says it), else this protocol's."""
    cap = config.get(CONFIG_KEY)
    if isinstance(cap, int) and not isinstance(cap, bool) and cap > 0:
        return cap
    return MAX_MESSAGE_BYTES


def fitted(data: bytes, message: dict, cap: int, about: str, env_indices: list) -> Optional[bytes]:
    """None if ``data`` (``message`` packed) fits ``cap``, else the packed ERROR to send instead.

    ``about``: the command the message answers ("step", "reset", "call('render')"...);
    ``env_indices``: the envs its results belong to, in order (a reply's ``results``)."""
    if len(data) <= cap:
        return None
    return packb(too_big(message, len(data), cap, about, env_indices))


def too_big(message: dict, size: int, cap: int, about: str, env_indices: list) -> dict:
    """The ERROR that replaces ``message`` (``size`` bytes packed, over ``cap``)."""
    cmd = message.get("cmd")
    if cmd == ERROR:
        clipped = _clipped(message)
        if len(packb(clipped)) <= cap:
            return clipped
    blobs = message.get("blobs") if cmd == EXTRA else message.get("extras")
    if isinstance(blobs, dict) and blobs:
        return _infos_too_big(blobs, size, cap, about or "step")
    results = message.get("results")
    if isinstance(results, list) and results:
        return _reply_too_big(results, size, cap, about, env_indices)
    what = f"its {cmd} message" if not about else f"its answer to {about}"
    return _error(None, about or str(cmd), f"{what} is {size:,} bytes", cap)


def _infos_too_big(blobs: dict, size: int, cap: int, phase: str) -> dict:
    """One error per env whose infos were in the message, the largest first."""
    envs = sorted(blobs, key=lambda i: -len(blobs[i]))
    errors = []
    for i in envs:
        own = len(blobs[i])
        if own > cap or len(envs) == 1:
            what = f"the infos of env {i} are {own:,} bytes encoded"
        else:
            others = _span(sorted(j for j in envs if j != i))
            what = (
                f"the infos of env {i} ({own:,} bytes encoded) and of envs {others} make one message "
                f"of {size:,} bytes beside the {phase}"
            )
        errors.append(_error(i, phase, what, cap))
    return dict(errors[0], more=errors[1:])


def _reply_too_big(results: list, size: int, cap: int, about: str, env_indices: list) -> dict:
    """The error naming the env whose result is largest."""
    sizes = [len(packb(result)) for result in results]
    largest = max(range(len(sizes)), key=sizes.__getitem__)
    env = env_indices[largest] if largest < len(env_indices) else None
    what = f"the reply to {about} is {size:,} bytes"
    if env is not None and len(results) > 1:
        what += f" (env {env}'s result: {sizes[largest]:,} bytes, the largest)"
    return _error(env, about, what, cap)


def _error(env_index: Optional[int], phase: str, what: str, cap: int) -> dict:
    return {
        "cmd": ERROR,
        "kind": KIND_MESSAGE_TOO_BIG,
        "env_index": env_index,
        "phase": phase,
        "type": ERROR_TYPE,
        "message": f"{what}, over the {cap:,}-byte cap on one control message, so it was not sent; {HINT}",
        "traceback": "",
    }


def _clipped(error: dict) -> dict:
    """An error report whose texts (an env's exception message, its traceback) are clipped."""

    def clip(value: Any) -> Any:
        if isinstance(value, str) and len(value) > CLIPPED_TEXT:
            return value[:CLIPPED_TEXT] + f"... [{len(value) - CLIPPED_TEXT:,} characters more, clipped]"
        return value

    out = {key: clip(value) for key, value in error.items() if key != "more"}
    more = error.get("more")
    if isinstance(more, list):
        out["more"] = [_clipped(entry) if isinstance(entry, dict) else entry for entry in more]
    return out


def _span(indices: list) -> str:
    """ "0-3, 7": consecutive runs of env indices."""
    runs = []
    start = previous = None
    for i in indices:
        if previous is not None and i == previous + 1:
            previous = i
            continue
        if start is not None:
            runs.append(f"{start}-{previous}" if previous != start else str(start))
        start = previous = i
    if start is not None:
        runs.append(f"{start}-{previous}" if previous != start else str(start))
    return ", ".join(runs)
