"""Env hosts in the benchmark: portal_shm's remote backend against a host on this machine.

Each system starts a real ``portal-shm host`` process on 127.0.0.1 (with fresh CURVE keys, or
``--insecure``) and, for ``--rtt-ms``/``--rate-mbit``, puts the emulated link of ``link.py`` in
front of it, in a process of its own, so a 30 ms cloud round trip and a 100 Mbit/s pipe are measured on one machine:

- ``remote``: async batches (``--batch-size``) or lockstep over the link;
- ``remote-lockstep``: the same link, lockstep (its ceiling is N / (RTT + N / X0));
- ``remote-x0``: the same host and batches through a zero-delay proxy: X0, the rate no link beats;
- ``remote-insecure``: no keys, for the cost of encryption;
- ``remote-rpc``: one connection and one session per env, stepped from a thread per env: the
  per-env RPC every remote-env anchor uses, on the same link.
"""

from __future__ import annotations

import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Optional

import numpy as np

from .options import BenchOptions
from .scenarios import Scenario


class _Host:
    """A host process with fresh keys in a temporary directory (``--insecure`` without), removed on close,
    that serves the scenario's env (an entry point is allowed by name, as its operator would)."""

    def __init__(self, sc: Scenario, insecure: bool) -> None:
        from ..remote.host.spawn import HostProcess, LocalKeys

        self.keys = None if insecure else LocalKeys.temporary("portal-shm-bench-")
        self.options: dict = {"insecure": True} if self.keys is None else self.keys.options()
        try:
            allow = ["--entry-points", sc.target] if ":" in sc.target else []
            self.process = HostProcess(self.keys, "--max-envs", "4096", "--max-envs-per-agent", "4096", *allow)
        except BaseException:
            self._remove_keys()
            raise
        self.address = self.process.address

    def close(self) -> None:
        try:
            self.process.stop()
        finally:
            self._remove_keys()

    def _remove_keys(self) -> None:
        if self.keys is not None:
            self.keys.remove()  # (secret keys first)


class _LinkProcess:
    """The emulated link in a process of its own (``python -m portal_shm.bench.link``), as a real
    network is: in the agent's process its event loop would share the agent's GIL."""

    def __init__(self, target: str, delay_ms: float, rate_mbit: Optional[float]) -> None:
        command = [sys.executable, "-m", "portal_shm.bench.link", "--target", target, "--delay-ms", str(delay_ms)]
        if rate_mbit:
            command += ["--rate-mbit", str(rate_mbit)]
        self.process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self.address = self.process.stdout.readline().strip()
        if not self.address.startswith("tcp://"):
            self.close()
            raise RuntimeError("the emulated link did not start")

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()  # (SIGINT may be ignored: CI runners and nohup leave it so)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process.stdout.close()


def _link(address: str, options: BenchOptions, zero: bool = False) -> Any:
    """An emulated link in front of ``address`` (None when the options ask for none)."""
    if zero:
        return _LinkProcess(address, 0.0, None)
    if options.rtt_ms or options.rate_mbit:
        return _LinkProcess(address, options.rtt_ms / 2, options.rate_mbit)
    return None


class RemoteSystem:
    """A RemoteVectorPortal with the host (and link) it was built with; closing closes all three."""

    def __init__(
        self,
        sc: Scenario,
        n: int,
        options: BenchOptions,
        *,
        insecure: bool = False,
        zero_link: bool = False,
        lockstep: bool = False,
    ) -> None:
        import portal_shm

        self._host = _Host(sc, insecure)
        self._link = None
        try:
            address = self._host.address
            self._link = _link(address, options, zero=zero_link)
            if self._link is not None:
                address = self._link.address
            self.portal = portal_shm.make_vec(
                sc.target,
                n,
                backend="remote",
                hosts=[address],
                compression=options.compression,
                vector_kwargs=options.vector_kwargs(lockstep),
                env_kwargs=sc.kwargs,
                **self._host.options,
            )
        except BaseException:
            self._close_rest()
            raise

    def __getattr__(self, name: str) -> Any:
        return getattr(self.portal, name)

    def bench_notes(self) -> dict:
        """The codec and compression ratio of this run, for the report."""
        stats = self.portal.wire_stats()[0]
        return {"codec": stats["codec"], "compression_ratio": stats["ratio"]}

    def _close_rest(self) -> None:
        if self._link is not None:
            self._link.close()
        self._host.close()

    def close(self) -> None:
        try:
            self.portal.close()
        finally:
            self._close_rest()


class RpcVector:
    """Per-env RPC: a one-env remote portal (its own connection and session) per env, stepped from
    a thread each, batched here; what a notebook stepping envs on a cloud box by hand looks like."""

    def __init__(self, sc: Scenario, n: int, options: BenchOptions) -> None:
        import portal_shm

        self._host = _Host(sc, insecure=False)
        self._link = None
        self.envs: list = []
        try:
            address = self._host.address
            self._link = _link(address, options)
            if self._link is not None:
                address = self._link.address
            self._pool = ThreadPoolExecutor(max_workers=n)
            make = lambda _: portal_shm.make_vec(  # noqa: E731
                sc.target,
                1,
                backend="remote",
                hosts=[address],
                compression=options.compression,
                env_kwargs=sc.kwargs,
                **self._host.options,
            )
            self.envs = list(self._pool.map(make, range(n)))
        except BaseException:
            self.close()
            raise
        first = self.envs[0]
        self.num_envs = n
        self.single_observation_space = first.single_observation_space
        self.single_action_space = first.single_action_space
        from gymnasium.vector.utils import batch_space

        self.action_space = batch_space(self.single_action_space, n)

    def reset(self, seed: Optional[int] = None, **kwargs: Any) -> Any:
        results = list(
            self._pool.map(lambda i: self.envs[i].reset(seed=None if seed is None else seed + i), range(self.num_envs))
        )
        return np.concatenate([r[0] for r in results]), {}

    def step(self, actions: Any) -> Any:
        actions = np.asarray(actions)
        results = list(self._pool.map(lambda i: self.envs[i].step(actions[i : i + 1]), range(self.num_envs)))
        return tuple(np.concatenate([r[k] for r in results]) for k in range(4)) + ({},)

    def close(self) -> None:
        for env in self.envs:
            env.close()
        if getattr(self, "_pool", None) is not None:
            self._pool.shutdown()
        if self._link is not None:
            self._link.close()
        self._host.close()
