"""The bottleneck verdict in words: what holds a run back, and the next step that helps.

The verdict itself is ``portal_shm.agent.stats.bound``'s (it comes in every ``stats()`` report as
``bound``); this module only says it to a person, once for every verb that shows it (``run`` at its
end, ``top`` under each portal), naming the knob to turn with a value that fits this portal's
layout: its envs, servers, batches and the machine's cores. What helps is the verdict's own list:

- ``"agent"``: the envs wait for the policy or learner; faster agent code, or async batches that let
  the envs step while it works; more servers or cores do not help.
- ``"straggler"``: in lockstep every batch waits for the slowest envs; find out why they are slow,
  or let async batches step the others meanwhile.
- ``"env"``: the envs' own work is the limit; more servers (up to one per core), more cores or
  other machines, or a cheaper env.
- ``"transport"``: the agent waits on envs that are mostly idle (wake-ups, the ring, messages or
  the network); fewer, larger servers, async batches, spinning or, remotely, compression.
"""

from __future__ import annotations

import shlex
from typing import Any, Optional

from ..agent.contract.grouping import batch_envs_per_server, default_envs_per_server, machine_cores

# What each verdict is bound by, as ``bound by: ...`` says it.
BOUND_BY = {
    "agent": "the agent",
    "straggler": "straggler envs",
    "env": "the envs",
    "transport": "the transport",
}


def half_batch(num_envs: int, envs_per_server: int = 1) -> Optional[int]:
    """An async batch size to try: the largest multiple of ``envs_per_server`` dividing ``num_envs``
    that is at most half of it (two batches in flight at least); None where there is none."""
    sizes = [b for b in range(envs_per_server, num_envs // 2 + 1, envs_per_server) if num_envs % b == 0]
    return max(sizes) if sizes else None


def _layout(stats: dict[str, Any]) -> tuple[int, int, int]:
    """``(num_envs, servers, envs_per_server)`` of the portal the report is of."""
    num_envs = len(stats.get("envs") or [])
    servers = len(stats.get("servers") or [])
    per = max((len(s.get("envs") or []) for s in stats.get("servers") or []), default=1)
    return num_envs, servers, max(per, 1)


def next_step(stats: dict[str, Any], batch_size: Optional[int] = None, cores: Optional[int] = None) -> Optional[str]:
    """What to do about the verdict of ``stats`` (a ``stats()`` report), or None while there is none.

    ``batch_size`` is the portal's (None or ``num_envs``: lockstep), ``cores`` the machine's its
    servers run on (default: this one's; a remote portal's servers run on their hosts)."""
    bound = stats.get("bound") or {}
    what = bound.get("verdict")
    if what not in BOUND_BY:
        return None
    num_envs, servers, per = _layout(stats)
    remote = bool(stats.get("hosts"))
    cores = cores or machine_cores()
    lockstep = not batch_size or batch_size >= num_envs
    batch = half_batch(num_envs, per) if lockstep else None
    batches = f"async batches (batch_size={batch})" if batch else None
    if what == "agent":
        then = f"step in {batches}, so that the envs step while it works" if batches else "give it more envs per call"
        return f"your policy/learner is the bottleneck: speed it up or {then}; more servers or cores do not help"
    if what == "straggler":
        slow = ", ".join(str(i) for i in bound.get("envs") or []) or "some envs"
        meanwhile = f"; or step in {batches}, so that the others step meanwhile" if batches else ""
        return (
            f"env {slow} step far slower than the rest and every batch waits for them: "
            f"look at what they do (their levels, seeds or their server's core){meanwhile}"
        )
    if what == "env":
        if remote:
            return "the envs use the cores of the hosts: more hosts or cores help, or a cheaper env"
        spread = default_envs_per_server(num_envs, cores) if lockstep else _batch_spread(num_envs, batch_size, cores)
        if spread < per:
            return (
                f"add servers: envs_per_server={spread} spreads the {num_envs} envs over the {cores} cores; "
                "past that, more cores or a cheaper env help"
            )
        return (
            f"the envs use the cores of this machine: more cores (it has {cores}) or env hosts on other machines "
            "help, or a cheaper env; more servers on the same cores do not"
        )
    larger = min(num_envs, 2 * per)
    fits = lockstep or (batch_size is not None and batch_size % larger == 0 and num_envs % larger == 0)
    helps = [f"fewer, larger servers (envs_per_server={larger})"] if servers > 1 and per < num_envs and fits else []
    helps += [batches] if batches else ([] if lockstep else ["larger batches"])
    helps += ["compression (lz4) over the network"] if remote else ["spinning (spin_wait)"]
    listed = f"{', '.join(helps[:-1])} or {helps[-1]}" if len(helps) > 1 else helps[0]
    return (
        f"the time goes to wake-ups, the ring and messages, not to the envs: {listed} help; "
        "with a cheap env every vector env pays this (portal-shm bench shows how much)"
    )


def _batch_spread(num_envs: int, batch_size: Optional[int], cores: int) -> int:
    """Async batches' default envs per server (whole servers to a batch) for these cores."""
    return batch_envs_per_server(num_envs, batch_size or num_envs, cores)


def verdict_lines(stats: dict[str, Any], batch_size: Optional[int] = None, cores: Optional[int] = None) -> list[str]:
    """``bound by: ...`` with the verdict's why, and ``next step: ...`` (the lines ``run`` prints)."""
    bound = stats.get("bound") or {}
    what = bound.get("verdict")
    why = bound.get("why") or "no verdict"
    if what not in BOUND_BY:
        return [f"bound by: not known yet ({why})"]
    lines = [f"bound by: {BOUND_BY[what]}: {why}"]
    step = next_step(stats, batch_size, cores)
    if step:
        lines.append(f"next step: {step}")
    return lines


def compare_command(
    env_id: str,
    num_envs: int,
    backend: str = "process",
    batch_size: Optional[int] = None,
    envs_per_server: Optional[int] = None,
    image: Optional[str] = None,
) -> str:
    """The ``portal-shm bench`` command that runs the same envs through portal-shm and gymnasium's
    ``AsyncVectorEnv`` side by side, with the env's raw single-process speed as reference.

    bench runs portals on the process and docker backends: other backends compare as process."""
    parts = ["portal-shm", "bench", shlex.quote(env_id), "-n", str(num_envs), "--against", "async"]
    if backend == "docker":
        parts += ["--backends", "docker"] + (["--image", shlex.quote(image)] if image else [])
    if batch_size and batch_size < num_envs:
        parts += ["--batch-size", str(batch_size)]
    if envs_per_server:
        parts += ["--envs-per-server", str(envs_per_server)]
    return " ".join(parts)
