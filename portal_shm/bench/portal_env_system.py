"""portal-env as a benchmark system: its env server as a local process, its agent-side client.

portal-env's agent side (``AgentSidePortal``) asks its server for one env, or for a gymnasium
SyncVectorEnv of ``num_envs`` envs inside the server. Two parts of that client cannot take vector
results: ``step`` does ``float(reward)`` on the reward array (TypeError), and ``action_space``
re-parses ``str(space)`` of the batched space (``MultiDiscrete([6 6 ...])`` is no Python literal).
So this adapter creates the envs through ``AgentSidePortal(num_envs=N)`` and steps them through
that client's own ``portal.Client`` futures (the call ``AgentSidePortal.step`` makes, minus the
conversion); the single-env action space comes from a one-env ``AgentSidePortal`` (its
observation space is not asked for: parsing ``str(space)`` fails on float32 Box bounds). Every step carries
the N actions to the server and the N observations back through portal's TCP sockets.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from typing import Any

from .options import BenchOptions
from .scenarios import Scenario

STARTUP_TIMEOUT = 60.0
STEP_TIMEOUT = 120.0  # a lost server otherwise leaves portal's client waiting forever
DIFFERENCES = (
    "portal-env 0.9: one env server process hosting the N envs as a gymnasium SyncVectorEnv, "
    "reached over TCP on localhost; its AgentSidePortal.step cannot take vector results "
    "(float(reward) on an array), so the harness calls that client's portal futures directly; "
    "reset ignores seeds; idle, its server spins a whole core (and its client does when the server "
    "is stopped), so the harness starts it afresh for each of its runs and never keeps it beside "
    "another system"
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_for_port(port: int, proc: subprocess.Popen, log_path: str) -> None:
    deadline = time.monotonic() + STARTUP_TIMEOUT
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"portal-env server exited with {proc.returncode}: {_tail(log_path)}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.1)
    raise TimeoutError(
        f"portal-env server did not listen on port {port} within {STARTUP_TIMEOUT:.0f} s: {_tail(log_path)}"
    )


def _tail(path: str, chars: int = 1500) -> str:
    try:
        with open(path, errors="replace") as f:
            return f.read()[-chars:]
    except OSError:
        return ""


class PortalEnvVector:
    """N envs in one portal-env server, stepped in lockstep with the vector API the harness uses."""

    def __init__(self, sc: Scenario, n: int, options: BenchOptions) -> None:
        import gymnasium as gym
        import portal
        from portal_env import AgentSidePortal
        from portal_env.config import config

        self.num_envs = n
        self.port = free_port()
        self.log_path = f"/tmp/psm-bench-portal-env-{os.getpid()}-{self.port}.log"
        kwargs = json.dumps({k: list(v) if isinstance(v, tuple) else v for k, v in sc.kwargs.items()})
        with open(self.log_path, "w") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "portal_shm.bench.portal_env_server", str(self.port), sc.target, kwargs],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        self.client = None
        clients = []
        try:
            _wait_for_port(self.port, self.proc, self.log_path)
            portal.setup(clientkw={"logging": False})
            name = f"psm-bench-{self.port}"  # AgentSidePortal finds its port by env name
            config.env_ports[name] = self.port
            single = AgentSidePortal(name)
            clients.append(single)
            self.single_action_space = single.action_space  # its observation_space re-parses str(space):
            single.close()  # float32 Box bounds (VizDoom) fail, and the
            self.action_space = gym.vector.utils.batch_space(self.single_action_space, n)  # loop needs none
            self.client = AgentSidePortal(name, num_envs=n)
            clients.append(self.client)
        except BaseException:
            # portal-env's AgentSidePortal names its env only by the private _env_id (hence SLF001).
            for client in clients:  # AgentSidePortal.__del__ would wait forever on a server that is gone
                client._env_id = None  # noqa: SLF001
                client.portal.close(timeout=1)
            self.client = None
            self._stop_server()
            raise
        clients[0].portal.close(timeout=1)

    def reset(self, seed: Any = None, options: Any = None) -> tuple:
        return self.client.portal.reset(self.client._env_id).result(timeout=STEP_TIMEOUT)  # noqa: SLF001

    def step(self, actions: Any) -> tuple:
        return self.client.portal.step(self.client._env_id, actions).result(timeout=STEP_TIMEOUT)  # noqa: SLF001

    def close(self) -> None:
        try:
            if self.client is not None:
                if self.proc.poll() is None:
                    self.client.portal.close_env(self.client._env_id).result(timeout=10)  # noqa: SLF001
                self.client._env_id = None  # noqa: SLF001
                self.client.portal.close(timeout=1)
        finally:
            self.client = None
            self._stop_server()

    def _stop_server(self) -> None:
        """The server and its batcher process share a session: end that process group."""
        for sig, wait in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                break
            try:
                self.proc.wait(timeout=wait)
                break
            except subprocess.TimeoutExpired:
                continue
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)  # the batcher may outlive its parent
        except ProcessLookupError:
            pass
        self.proc.wait()
        try:
            os.unlink(self.log_path)
        except OSError:
            pass
