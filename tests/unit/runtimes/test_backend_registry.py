"""A backend is one module of runtimes/ and one ``register_backend``: make_vec's options and an env
host's allow-list come from its own declaration (``agent_options``, ``for_agent``), with no edit
to the API or the host. A toy backend defined here stands for a new one."""

import dataclasses
import sys
from dataclasses import dataclass
from typing import Any, ClassVar, Optional

import pytest

import portal_shm.remote.client.vector as remote_vector
from portal_shm import api
from portal_shm.errors import HostPolicyError, PortalError
from portal_shm.remote.host.policy import AGENT_RUNTIME_OPTIONS, HostPolicy
from portal_shm.runtimes.backend import Backend, ServerHandle, ServerLaunch
from portal_shm.runtimes.hosting import HostOffer
from portal_shm.runtimes.registry import (
    BACKENDS,
    hosted_option_names,
    hosted_runtimes,
    register_backend,
    resolve_backend,
)


@dataclass(frozen=True)
class ToyBackend(Backend):
    """A new kind of runtime: an interpreter agents pick by name, a sandbox only the operator sets."""

    python: Optional[str] = None
    sandbox: str = "strict"
    name = "toy"
    agent_options: ClassVar[Optional[tuple[str, ...]]] = ("python",)
    operator_note: ClassVar[str] = "toys always run sandboxed"

    @classmethod
    def for_agent(cls, options: dict[str, Any], offer: HostOffer) -> Backend:
        return cls(python=offer.python(options.get("python")))

    def start(self, launch: ServerLaunch) -> ServerHandle:
        raise NotImplementedError


@pytest.fixture
def toy():
    register_backend(ToyBackend)
    try:
        yield ToyBackend
    finally:
        BACKENDS.pop("toy")


class Recorder:
    """Stands in for a portal: what make_vec would have started."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.args, self.kwargs = args, kwargs


def test_make_vec_splits_a_registered_backends_options_from_the_envs_kwargs(toy, monkeypatch):
    monkeypatch.setattr(api, "VectorPortal", Recorder)
    portal = api.make_vec("CartPole-v1", 2, backend="toy", python="/usr/bin/python3", sandbox="loose", gravity=3)
    specs = portal.args[0]
    assert [spec.backend for spec in specs] == [ToyBackend(python="/usr/bin/python3", sandbox="loose")] * 2
    assert specs[0].kwargs == {"gravity": 3}


def test_make_vec_hands_a_hosted_runtimes_options_to_the_hosts(toy, monkeypatch):
    """Its agent options and its operator's fields both travel (the host refuses the latter by name)."""
    monkeypatch.setattr(remote_vector, "RemoteVectorPortal", Recorder)
    portal = api.make_vec(
        "CartPole-v1", 2, backend="remote", hosts=["tcp://h:5555"], runtime="toy", python="mine", sandbox="x", g=1
    )
    _, _, hosted, env_kwargs = portal.args
    assert hosted.runtime == "toy" and hosted.runtime_options == {"python": "mine", "sandbox": "x"}
    assert env_kwargs == {"g": 1}


def test_an_env_host_runs_a_registered_backend_through_its_declaration(toy):
    assert "toy" in hosted_runtimes() and hosted_option_names("toy") == {"python", "sandbox"}
    policy = HostPolicy(runtimes=("process", "toy"), pythons={"mine": sys.executable})
    policy.check()
    grant = policy.grant({"env_id": "CartPole-v1", "runtime": "toy", "runtime_options": {"python": "mine"}}, 2)
    assert grant.backend == ToyBackend(python=sys.executable, sandbox="strict")
    with pytest.raises(HostPolicyError, match=r"'sandbox' of the toy runtime is the host operator's.*sandboxed\)"):
        policy.grant({"env_id": "CartPole-v1", "runtime": "toy", "runtime_options": {"sandbox": "off"}}, 2)
    with pytest.raises(HostPolicyError, match="never a path"):
        policy.grant({"env_id": "CartPole-v1", "runtime": "toy", "runtime_options": {"python": "/bin/sh"}}, 2)
    with pytest.raises(HostPolicyError, match="does not run envs on the 'toy' runtime"):
        HostPolicy().grant({"env_id": "CartPole-v1", "runtime": "toy"}, 2)  # until the operator offers it


def test_hosts_refuse_backends_that_declare_no_agent_options():
    assert "attach" not in hosted_runtimes()
    with pytest.raises(ValueError, match="runtime='attach': hosts run envs on process, docker, venv, micromamba"):
        api.make_vec("CartPole-v1", backend="remote", hosts=["tcp://h:5555"], runtime="attach")
    with pytest.raises(PortalError, match="--runtimes attach: hosts run envs on process, docker, venv, micromamba"):
        HostPolicy(runtimes=("attach",)).check()
    with pytest.raises(HostPolicyError, match="does not run envs on the 'attach' runtime"):
        HostPolicy(runtimes=("attach",)).grant({"env_id": "CartPole-v1", "runtime": "attach"}, 1)


@pytest.mark.parametrize("runtime", sorted(AGENT_RUNTIME_OPTIONS))
def test_each_hosted_backend_declares_what_agents_may_set(runtime):
    cls = BACKENDS[runtime]
    assert AGENT_RUNTIME_OPTIONS[runtime] == cls.agent_options
    assert cls.for_agent.__func__ is not Backend.for_agent.__func__  # it builds itself for a host
    fields = {field.name for field in dataclasses.fields(cls)}
    assert hosted_option_names(runtime) == fields | set(cls.agent_options)


def test_registration_takes_dataclass_backends_under_a_free_name(toy):
    with pytest.raises(ValueError, match="'toy' is taken"):
        register_backend(dataclasses.make_dataclass("Other", [], bases=(ToyBackend,), frozen=True))
    with pytest.raises(ValueError, match="'remote' is taken"):
        register_backend(
            dataclasses.make_dataclass("R", [], bases=(ToyBackend,), frozen=True, namespace={"name": "remote"})
        )
    with pytest.raises(TypeError, match="not a dataclass subclass of Backend"):
        register_backend(dict)  # type: ignore[arg-type]
    assert register_backend(ToyBackend) is ToyBackend  # (again: the same class)
    assert resolve_backend("toy", python="x") == ToyBackend(python="x")
