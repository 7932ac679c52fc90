#!/usr/bin/env python
"""How long each fault takes to surface in the agent, one real run per fault.

    python benchmarks/fault_latency.py --json benchmarks/results/fault_latency_2core.json

The clock starts when the faulting call starts (or the kill is sent) and stops when the agent
has the exception (or, for the restart policy, the step that reports ``env_restarted``). Hangs
use ``step_timeout=1``, so they surface after about one second by construction.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from typing import Callable

import numpy as np

import portal_shm
from portal_shm import VectorPortal
from portal_shm.backends import DockerBackend, EnvSpec

FAULTY = "portal_shm.server.example_envs:FaultyEnv"
ZERO = np.zeros(2, np.int64)


def _pair(backend=None, **fault) -> VectorPortal:
    extra = {} if backend is None else {"backend": backend}
    return VectorPortal(
        [EnvSpec(FAULTY, {"fault": "none"}, **extra), EnvSpec(FAULTY, fault, **extra)],
        step_timeout=1.0,
        envs_per_server=1,
    )


def _pid(envs, server: int) -> int:
    return int(envs.servers[server]["runtime"].split()[2].rstrip(","))


def _timed(
    make: Callable[[], VectorPortal], trigger: Callable[[VectorPortal], None], initial_reset: bool = True
) -> dict:
    envs = make()
    try:
        if initial_reset:
            envs.reset(seed=0)
        started = time.monotonic()
        try:
            trigger(envs)
            outcome = "no error"
        except portal_shm.PortalError as exc:
            outcome = f"{type(exc).__name__}: {str(exc).splitlines()[0][:160]}"
        return {"seconds": round(time.monotonic() - started, 4), "outcome": outcome}
    finally:
        envs.close()


def _step_until_error(envs, limit=200) -> None:
    for _ in range(limit):
        envs.step(ZERO)


def cases(docker_image: str | None) -> dict:
    out = {}
    for phase in ("step", "reset", "render"):  # (an env's close() raising is close()'s to log, not to time)
        trigger = {
            "step": lambda e: e.step(ZERO),
            "reset": lambda e: e.reset(seed=1),
            "render": lambda e: e.render(),
        }[phase]
        out[f"raise in {phase}"] = lambda p=phase, t=trigger: _timed(
            lambda: _pair(fault="raise", phase=p, after=0), t, initial_reset=p != "reset"
        )
    out["raise in call"] = lambda: _timed(
        lambda: portal_shm.make_vec("CartPole-v1", 2), lambda e: e.call("no_such_method")
    )
    for fault in ("segfault", "exit", "hang", "spin", "stop"):
        out[f"server {fault} in step"] = lambda f=fault: _timed(
            lambda: _pair(fault=f, phase="step", after=1), lambda e: e.step(ZERO)
        )
    out["server SIGKILL between steps"] = lambda: _timed(
        lambda: _pair(fault="none"), lambda e: (os.kill(_pid(e, 1), signal.SIGKILL), _step_until_error(e))
    )

    def restart(envs):
        os.kill(_pid(envs, 1), signal.SIGKILL)
        for _ in range(1000):
            *_, infos = envs.step(ZERO)
            if "_env_restarted" in infos:
                return

    out["restart after SIGKILL (until the step reporting env_restarted)"] = lambda: _timed(
        lambda: portal_shm.make_vec(
            "CartPole-v1", 2, vector_kwargs={"on_env_failure": "restart", "envs_per_server": 1}
        ),
        restart,
    )
    out["agent SIGKILLed while idle: servers gone, run dir removed"] = lambda: _agent_case("idle", signal.SIGKILL)
    out["agent SIGKILLed mid-step (env spinning): watchdog cleanup"] = lambda: _agent_case("step", signal.SIGKILL)
    out["Ctrl-C during reset (env spinning)"] = lambda: _agent_case("reset", signal.SIGINT)
    out["Ctrl-C during step (env spinning)"] = lambda: _agent_case("step", signal.SIGINT)
    if docker_image:
        out["agent SIGKILLed mid-step, env in a container: container exits"] = lambda: _agent_case(
            "step", signal.SIGKILL, docker_image
        )
        backend = DockerBackend(image=docker_image)
        out["container docker kill"] = lambda: _timed(
            lambda: _pair(backend), lambda e: (_kill_container(e), _step_until_error(e))
        )
        out["container OOM in step (mem_limit 192m)"] = lambda: _timed(
            lambda: _pair(DockerBackend(image=docker_image, mem_limit="192m"), fault="oom", phase="step", after=1),
            lambda e: _step_until_error(e, 5),
        )
        out["container spin in step"] = lambda: _timed(
            lambda: _pair(backend, fault="spin", phase="step", after=1), lambda e: e.step(ZERO)
        )
    return out


AGENT = textwrap.dedent("""
    import sys, time, numpy as np, portal_shm
    from portal_shm import VectorPortal
    from portal_shm.backends import DockerBackend, EnvSpec
    mode, image = sys.argv[1], sys.argv[2]
    backend = {"backend": DockerBackend(image=image)} if image != "-" else {}
    fault = {"idle": "none", "step": "spin", "reset": "spin"}[mode]
    envs = VectorPortal([EnvSpec("portal_shm.server.example_envs:FaultyEnv", {"fault": fault, "phase": mode}, **backend)])
    print(envs.tag, flush=True)
    if mode == "step":
        envs.reset(seed=0)
    print("ready", flush=True)
    if mode == "idle":
        time.sleep(600)
    envs.reset(seed=0) if mode == "reset" else envs.step(np.zeros(1, np.int64))
""")


def _agent_case(mode: str, signum: int, image: str = "-") -> dict:
    """Start an agent, let it block (idle or inside a spinning env), signal it, time the cleanup."""
    agent = subprocess.Popen([sys.executable, "-c", AGENT, mode, image], stdout=subprocess.PIPE, text=True)
    tag = agent.stdout.readline().strip().lstrip("/")
    agent.stdout.readline()
    time.sleep(1.0)
    started = time.monotonic()
    agent.send_signal(signum)
    code = agent.wait(timeout=60)
    exited = time.monotonic() - started
    deadline = started + 60
    while time.monotonic() < deadline:
        left = _leftover_files(tag)
        if not left and not _running_containers(tag):
            break
        time.sleep(0.05)
    return {
        "seconds": round(time.monotonic() - started, 3),
        "agent_exit": round(exited, 3),
        "exit_code": code,
        "outcome": f"left behind: {left}"
        if left
        else "nothing left behind but, with containers, their empty bind-mounted run directory (for gc)",
    }


def _leftover_files(tag: str) -> list:
    """/dev/shm names, sockets, logs of the portal; empty directories do not count."""
    left = []
    for base in ("/dev/shm", "/tmp"):
        for name in os.listdir(base):
            path = os.path.join(base, name)
            if tag in name:
                if os.path.isdir(path):
                    left.extend(os.path.join(path, entry) for entry in os.listdir(path))
                else:
                    left.append(path)
    return left


def _running_containers(tag: str) -> list:
    try:
        from portal_shm.runtimes.docker import docker_client

        return docker_client().containers.list(filters={"label": f"portal-shm.portal={tag}"})
    except Exception:
        return []


def _kill_container(envs) -> None:
    from portal_shm.runtimes.docker import docker_client

    tag = envs.tag
    for container in docker_client().containers.list(filters={"label": f"portal-shm.portal={tag}"}):
        if container.labels.get("portal-shm.server") == "1":
            container.kill()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--docker-image", help="an image with this checkout's portal_shm (tests build portal-shm-test/faults)"
    )
    parser.add_argument("--json")
    args = parser.parse_args()
    results = {}
    for name, run in cases(args.docker_image).items():
        results[name] = run()
        extra = f" (agent exited after {results[name]['agent_exit']} s)" if "agent_exit" in results[name] else ""
        print(f"{name:70s} {results[name]['seconds']!s:>8} s  {results[name]['outcome']}{extra}", flush=True)
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(results, handle, indent=1)


if __name__ == "__main__":
    main()
