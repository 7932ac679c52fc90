"""Env hosts placed by Ray in the benchmark, and the naive Ray way beside them.

Both run on a one-node Ray started for the run on this machine (127.0.0.1) and shut down after it:

- ``ray``: ``backend="ray"``, one host that Ray placed, stepped over the remote protocol: set
  beside ``remote`` (a host started by hand) it is the cost of letting Ray place the host;
- ``ray-naive``: what Ray alone gives, one actor per env and one ``ray.get`` of every env's step
  call per step (RLlib's remote env workers, a gymnasium env in each), observations through Ray's
  object store.

The CPU the bench counts for them is the agent's and the actors' processes' (with the env servers
under them); Ray's own daemons (raylet, GCS) are left out, as they serve the whole cluster.
"""

from __future__ import annotations

import os
from typing import Any, Optional

import numpy as np

from .options import BenchOptions
from .scenarios import Scenario


class _LocalRay:
    """A Ray of this machine for one system, unless this process is connected to one already."""

    def __init__(self) -> None:
        os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
        import ray

        self.owned = not ray.is_initialized()
        if self.owned:
            ray.init(
                num_cpus=os.cpu_count(),
                _node_ip_address="127.0.0.1",
                include_dashboard=False,
                log_to_driver=False,
            )

    def close(self) -> None:
        if self.owned:
            import ray

            ray.shutdown()
            self.owned = False


class RaySystem:
    """A RayVectorPortal with one host on this machine's Ray; closing stops both."""

    def __init__(self, sc: Scenario, n: int, options: BenchOptions) -> None:
        import portal_shm

        from ..remote.host.policy import HostPolicy

        self._ray = _LocalRay()
        try:
            self.portal = portal_shm.make_vec(
                sc.target,
                n,
                backend="ray",
                num_hosts=1,
                compression=options.compression,
                vector_kwargs=options.vector_kwargs(),
                env_kwargs=sc.kwargs,
                host_policy=HostPolicy(entry_points=(sc.target,)) if ":" in sc.target else None,
            )
        except BaseException:
            self._ray.close()
            raise

    def __getattr__(self, name: str) -> Any:
        return getattr(self.portal, name)

    @property
    def servers(self) -> list:
        """The host actors' processes, whose CPU (and their env servers') the bench counts."""
        return [{"pid": e["pid"]} for e in self.portal.host_endpoints()]

    def close(self) -> None:
        try:
            self.portal.close()
        finally:
            self._ray.close()


class _EnvActor:
    """One env in a Ray actor; an ended episode is reset in the same call, as RLlib's workers do."""

    def __init__(self, make: Any) -> None:
        self.env = make()

    def pid(self) -> int:
        return os.getpid()

    def reset(self, seed: Optional[int]) -> Any:
        return self.env.reset(seed=seed)[0]

    def step(self, action: Any) -> tuple:
        obs, reward, terminated, truncated, _ = self.env.step(action)
        if terminated or truncated:
            obs, _ = self.env.reset()
        return obs, reward, terminated, truncated


class NaiveRayVector:
    """One actor per env, batched here: ``ray.get`` of all N step calls, every step."""

    def __init__(self, sc: Scenario, n: int, options: BenchOptions) -> None:
        import ray
        from gymnasium.vector.utils import batch_space

        self._ray = _LocalRay()
        try:
            actor = ray.remote(num_cpus=0)(_EnvActor)
            self.actors = [actor.remote(sc.env_fn()) for _ in range(n)]
            probe = sc.env_fn()()
            self.single_observation_space = probe.observation_space
            self.single_action_space = probe.action_space
            probe.close()
        except BaseException:
            self._ray.close()
            raise
        self.num_envs = n
        self.action_space = batch_space(self.single_action_space, n)
        self.servers = [{"pid": pid} for pid in ray.get([a.pid.remote() for a in self.actors])]

    def reset(self, seed: Optional[int] = None, **kwargs: Any) -> Any:
        import ray

        seeds = [None if seed is None else seed + i for i in range(self.num_envs)]
        return np.stack(ray.get([a.reset.remote(s) for a, s in zip(self.actors, seeds)])), {}

    def step(self, actions: Any) -> Any:
        import ray

        results = ray.get([a.step.remote(action) for a, action in zip(self.actors, actions)])
        obs, reward, terminated, truncated = zip(*results)
        return np.stack(obs), np.array(reward), np.array(terminated), np.array(truncated), {}

    def close(self) -> None:
        import ray

        for actor in self.actors:
            ray.kill(actor)
        self._ray.close()
