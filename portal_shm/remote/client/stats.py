"""``stats()`` of a remote portal: each host's report of its local portal, checked and merged.

A host's report is untrusted: only the fields a local report has are taken, each as a finite
number (or None) of bounded size, and env and server indices are renumbered into this portal's
(the host's offset). The agent's own shares (inside portal calls, away) are measured here, and
the verdict is made here over the merged report, so a link that is the bottleneck reads as
``"transport"`` (the hosts' envs idle while the agent waits).
"""

from __future__ import annotations

import math
from typing import Any, Optional

from ...agent.contract.validate import is_hosting
from ...agent.stats.bound import verdict
from ...errors import ServerProtocolError

_ENV_INTS = ("steps", "episodes", "resets", "restarts", "recycles")
_SERVER_NUMBERS = ("steps_per_s", "busy", "cpu", "rss_mb")
_LATENCY = ("samples", "mean", "p50", "p90", "p99")
# A host's quotas as [used, limit] (``portal_shm.remote.host.quotas.Quotas.usage``).
_QUOTAS = ("sessions", "agent_sessions", "envs", "agent_envs", "fds", "unacked_bytes")


def _number(value: Any, what: str) -> Optional[float]:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise ServerProtocolError(f"{what}: {value!r:.40} is not a non-negative number")
    return float(value)


def _dict(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ServerProtocolError(f"{what} is not a mapping")
    return value


def _list(value: Any, what: str, limit: int) -> list[Any]:
    if not isinstance(value, list) or len(value) > limit:
        raise ServerProtocolError(f"{what} is not a list of at most {limit} items")
    return value


def host_part(report: Any, link: Any, first_server: int) -> dict[str, Any]:
    """One host's report with this portal's numbering; raises ``ServerProtocolError`` if malformed."""
    who = f"host {link.address}'s stats"
    report = _dict(report, who)
    envs = []
    for item in _list(report.get("envs"), f"{who} envs", link.num_envs):
        item = _dict(item, f"{who} env")
        env = item.get("env")
        if not isinstance(env, int) or not 0 <= env < link.num_envs:
            raise ServerProtocolError(f"{who} names env {env!r:.20}, which it does not serve")
        server = item.get("server")
        out: dict[str, Any] = {
            "env": link.offset + env,
            "server": None if not isinstance(server, int) else first_server + server,
            "host": link.address,
            "steps_per_s": _number(item.get("steps_per_s"), who),
        }
        for key in _ENV_INTS:
            out[key] = int(_number(item.get(key), who) or 0)
        latency = item.get("latency_us")
        out["latency_us"] = (
            None if latency is None else {key: _number(_dict(latency, who).get(key), who) for key in _LATENCY}
        )
        envs.append(out)
    servers = []
    for item in _list(report.get("servers"), f"{who} servers", link.num_envs):
        item = _dict(item, f"{who} server")
        index = item.get("server")
        if not isinstance(index, int) or not 0 <= index < link.num_envs:
            raise ServerProtocolError(f"{who} names server {index!r:.20}")
        local = _list(item.get("envs"), who, link.num_envs)
        if not all(isinstance(i, int) and 0 <= i < link.num_envs for i in local):
            raise ServerProtocolError(f"{who} names envs it does not serve")
        if not is_hosting(item.get("hosting")):
            raise ServerProtocolError(f"{who} sent an invalid hosting (what steps a server's envs)")
        servers.append(
            {
                "server": first_server + index,
                "envs": [link.offset + i for i in local],
                "host": link.address,
                "pid": None,
                "hosting": item.get("hosting"),
                **{key: _number(item.get(key), who) for key in _SERVER_NUMBERS},
            }
        )
    ring = _dict(report.get("ring", {}), who)
    quota = {}
    for key, pair in _dict(report.get("quota", {}), who).items():
        if key in _QUOTAS and isinstance(pair, list) and len(pair) == 2:
            quota[key] = [int(_number(pair[0], who) or 0), int(_number(pair[1], who) or 0)]
    return {
        "quota": quota,
        "envs": envs,
        "servers": servers,
        "steps_per_s": _number(report.get("steps_per_s"), who) or 0.0,
        "steps": int(_number(report.get("steps"), who) or 0),
        "episodes": int(_number(report.get("episodes"), who) or 0),
        "ring_bytes_per_s": _number(ring.get("bytes_per_s"), who) or 0.0,
        "since_start": _dict(report.get("since_start", {}), who),
    }


def merge(parts: list[Any], agent: dict[str, Any], since_start: dict[str, Any], wire: list[Any]) -> dict[str, Any]:
    """The hosts' parts (in host order) as one report, with the agent's shares and the wire's bytes."""
    report: dict[str, Any] = {
        "window_s": agent.pop("window_s"),
        "steps": sum(p["steps"] for p in parts),
        "steps_per_s": sum(p["steps_per_s"] for p in parts),
        "episodes": sum(p["episodes"] for p in parts),
        "agent": agent,
        "ring": {"bytes_per_s": sum(p["ring_bytes_per_s"] for p in parts)},
        "envs": [env for p in parts for env in p["envs"]],
        "servers": [server for p in parts for server in p["servers"]],
        "hosts": [{**w, "quota": p["quota"]} for w, p in zip(wire, parts)],
    }
    steps = 0
    for p in parts:
        value = p["since_start"].get("steps")
        if isinstance(value, int) and value >= 0:
            steps += value
    since_start.pop("window_s", None)
    report["since_start"] = {"steps": steps, "agent": since_start}
    report["bound"] = verdict(report)
    return report
