"""The portal kinds of the contract suite, and ``make``: ``make_vec`` for the kind under test.

Every test of ``test_contract.py`` runs once per kind: ``process``, ``venv`` (a cached venv with
the agent's gymnasium), ``docker`` (the ``portal-shm/ale`` image), ``remote`` (two real
``portal-shm host`` processes on 127.0.0.1, with keys) and ``ray`` (a local cluster of a head and
one worker node, one CPU each). A kind that cannot run here is skipped with the reason (Docker
missing: failed instead when ``PORTAL_SHM_REQUIRE_DOCKER=1``). A kind's hosts or cluster start
with its first test and stop after its last, before the next kind's start (module scope: the Ray
cluster is down before tests/integration starts its own).
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import os
from typing import Any, Callable

import pytest

from testkit.native_ale import ATARI_VECTOR

# Read by Ray at import (as in tests/integration/conftest.py): keeps 127.0.0.1 as the nodes' address.
os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"

KINDS = ["process", "venv", "docker", "remote", "ray"]


class Factory:
    """``make(env_id, num_envs, vector_kwargs=None, hosts=1, **env_kwargs)``: a portal of ``kind``.

    ``hosts``: the env hosts a remote or Ray portal spreads its envs over (local kinds have none
    and ignore it). Every portal made is closed after its test, whatever the test did.
    """

    def __init__(
        self,
        kind: str,
        options: Callable[[int], dict],
        max_hosts: int = 1,
        host_pids: Callable[[Any], list] = lambda envs: [],
    ) -> None:
        self.kind = kind
        self.hosted = kind in ("remote", "ray")
        self.host_pids = host_pids  # a portal -> the processes of its env hosts (hosted kinds)
        self._options = options  # hosts -> make_vec's keyword arguments for this kind
        self._max_hosts = max_hosts
        self.made: list = []

    def __call__(
        self, env_id: str, num_envs: int, vector_kwargs: dict | None = None, hosts: int = 1, **env_kwargs: Any
    ):
        import portal_shm

        assert hosts <= self._max_hosts or not self.hosted, f"{self.kind} has {self._max_hosts} hosts"
        envs = portal_shm.make_vec(env_id, num_envs, vector_kwargs=vector_kwargs, **self._options(hosts), **env_kwargs)
        self.made.append(envs)
        return envs

    def close_all(self) -> None:
        while self.made:
            self.made.pop().close()


def _process(stack, tmp_path_factory) -> Factory:
    return Factory("process", lambda hosts: {"backend": "process"})


def _venv(stack, tmp_path_factory) -> Factory:
    import gymnasium

    from portal_shm.runtimes.venv import VenvBackend, ensure_venv

    # The agent's gymnasium (CartPole and the example envs need it there) and ale-py (the native
    # vector env of ``presets.atari_vector``), in the default cache: built once, a cache hit in every
    # later run with the same env server.
    requirements: tuple = (f"gymnasium=={gymnasium.__version__}",)
    try:
        requirements += (f"ale-py=={importlib.metadata.version('ale-py')}",)
    except importlib.metadata.PackageNotFoundError:
        pass  # (the native vector env tests skip)
    ensure_venv(VenvBackend(requirements=requirements))
    return Factory("venv", lambda hosts: {"backend": "venv", "requirements": requirements})


def _docker(stack, tmp_path_factory) -> Factory:
    from testkit.docker_images import docker_or_skip, ensure_image

    image = ensure_image(docker_or_skip(), "ale", "portal-shm/ale")  # gymnasium and the example envs
    return Factory("docker", lambda hosts: {"backend": "docker", "image": image})


def _remote(stack, tmp_path_factory) -> Factory:
    from testkit.hosts import EXAMPLE_ENVS, HostProcess, Keys

    keys = Keys(str(tmp_path_factory.mktemp("contract-keys")))
    processes: list = []

    def stop() -> None:
        for process in processes:
            process.stop()
        for process in processes:
            assert process.process.returncode == 0, process.log

    stack.callback(stop)
    flags = ("--entry-points", f"{EXAMPLE_ENVS[1]},{ATARI_VECTOR}")  # (the example envs, and the native preset)
    for _ in range(2):
        processes.append(HostProcess(keys, *flags))
    return Factory(
        "remote",
        lambda hosts: {"backend": "remote", "hosts": [p.address for p in processes[:hosts]], **keys.options()},
        max_hosts=2,
        host_pids=lambda envs: [p.process.pid for p in processes if p.address in {h["address"] for h in envs.hosts}],
    )


def _ray(stack, tmp_path_factory) -> Factory:
    pytest.importorskip("ray", reason="ray is not installed")
    import portal_shm
    from testkit.ray_cluster import shutdown, start_cluster

    cluster = start_cluster(workers=1)  # a head and a worker, one CPU each: one env host per node
    stack.callback(shutdown, cluster)
    policy = portal_shm.backends.HostPolicy(entry_points=("portal_shm.server.example_envs:*", ATARI_VECTOR))
    return Factory(
        "ray",
        lambda hosts: {"backend": "ray", "num_hosts": hosts, "host_policy": policy},
        max_hosts=2,
        host_pids=lambda envs: [e["pid"] for e in envs.host_endpoints()],
    )


SETUP = {"process": _process, "venv": _venv, "docker": _docker, "remote": _remote, "ray": _ray}


# The lanes of the kinds (tests/conftest.py): every test here is integration (test_contract.py's
# pytestmark) unless its kind puts it in a lane before it.
MARKS = {"docker": [pytest.mark.docker], "venv": [pytest.mark.build], "ray": [pytest.mark.slow]}


@pytest.fixture(scope="module", params=[pytest.param(kind, marks=MARKS.get(kind, [])) for kind in KINDS])
def kind(request) -> str:
    return request.param


@pytest.fixture(scope="module")
def make(kind, tmp_path_factory):
    with contextlib.ExitStack() as stack:
        factory = SETUP[kind](stack, tmp_path_factory)
        stack.callback(factory.close_all)
        yield factory


@pytest.fixture(autouse=True)
def _close_portals(make):
    """Every portal a test made is closed after it, passed or failed."""
    yield
    make.close_all()
