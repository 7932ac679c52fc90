"""Every row of the infos table (docs/concepts/infos.md) on every kind of runtime it names.

An env puts one value of each kind in its infos (``InfoKindsEnv``: at the top and nested, at
resets, steps and in SAME_STEP's ``final_info``). Where the table says a runtime carries a kind,
the portal's infos equal SyncVectorEnv's over the same envs, types included; where it says
refused, the step raises ``InfoEncodingError`` naming env, key path and type, and the restart
policy does not restart the env for it.
"""

import dataclasses
import functools
import os

import numpy as np
import pytest
from gymnasium.vector import AutoresetMode, SyncVectorEnv

import portal_shm
from portal_shm import VectorPortal
from portal_shm.backends import DockerBackend, EnvSpec, ProcessBackend, VenvBackend
from portal_shm.errors import InfoEncodingError
from portal_shm.server.example_envs import INFO_KINDS, InfoKindsEnv, info_value
from portal_shm.wire.info_codec import describe
from testkit.compare import assert_same
from testkit.hosts import EXAMPLE_ENVS, HostProcess, Keys

pytestmark = pytest.mark.integration

HERE = os.path.dirname(os.path.abspath(__file__))
ENV = "portal_shm.server.example_envs:InfoKindsEnv"
STEPS = 4  # episodes of 3 steps: the fourth step's infos hold SAME_STEP's final_info

# The table: what crosses where. Every other kind is refused across a trust boundary, and
# carried exactly (pickled) from a runtime that is none.
EXACT_EVERYWHERE = ("plain", "numpy", "batched_subclass")
NEVER = ("unpicklable",)  # pickle cannot take it: no runtime but the agent's own process holds it
PICKLED = tuple(k for k in INFO_KINDS if k not in EXACT_EVERYWHERE + NEVER)
NESTED_IN_LIST = ("timedelta64", "subclass_in_list")  # the value is a list: its first item is refused


@dataclasses.dataclass(frozen=True)
class FencedProcess(ProcessBackend):
    """A process runtime that the agent treats as a trust boundary (as a container is), so the
    refusing path runs on machines without Docker too."""

    def trust_boundary(self):
        return "test fence"


def _docker_client():
    from portal_shm.errors import DockerUnavailableError
    from portal_shm.runtimes.docker import docker_client

    try:
        return docker_client()
    except DockerUnavailableError as exc:
        if os.environ.get("PORTAL_SHM_REQUIRE_DOCKER") == "1":
            raise
        pytest.skip(str(exc))


@pytest.fixture(scope="module")
def docker_backend():
    from portal_shm.runtimes.image_build import build_image

    _docker_client()
    return DockerBackend(image=build_image(os.path.join(HERE, "images", "faults"), "portal-shm-test/faults"))


@pytest.fixture(scope="module")
def venv_backend(tmp_path_factory):
    """A venv of its own: numpy 1 there, the agent's numpy 2 unpickles what it sends."""
    return VenvBackend(requirements=("numpy<2", "gymnasium>=1.0"), cache_dir=str(tmp_path_factory.mktemp("cache")))


# runtime -> (its boundary as errors name it, or None: carries pickles)
RUNTIMES = {"process": None, "venv": None, "fenced": "test fence", "docker": "container"}


@pytest.fixture(
    params=[
        "process",
        pytest.param("venv", marks=pytest.mark.build),
        "fenced",
        pytest.param("docker", marks=pytest.mark.docker),
    ]
)
def runtime(request):
    name = request.param
    if name == "process":
        return name, ProcessBackend()
    if name == "fenced":
        return name, FencedProcess()
    return name, request.getfixturevalue(f"{name}_backend")


def _portal(backend, kind, n=2, **kwargs):
    return VectorPortal(
        [EnvSpec(ENV, {"kind": kind, **kwargs.pop("env", {})}, backend)] * n,
        autoreset_mode="SameStep",
        envs_per_server=1,
        **kwargs,
    )


def _sync(kind, n=2):
    return SyncVectorEnv([functools.partial(InfoKindsEnv, kind)] * n, autoreset_mode=AutoresetMode.SAME_STEP)


def _carried(envs, kind):
    expected = _sync(kind)
    try:
        assert_same(envs.reset(seed=0)[1], expected.reset(seed=0)[1], "reset infos")
        for t in range(STEPS):
            actions = np.zeros(2, np.int64)
            assert_same(envs.step(actions)[4], expected.step(actions)[4], f"infos of step {t}")
    finally:
        expected.close()


def _refused(envs, kind, words):
    with pytest.raises(InfoEncodingError) as caught:
        envs.reset(seed=0)
    error = caught.value
    suffix = "[0]" if kind in NESTED_IN_LIST else ""
    assert error.env_index == 0 and error.key == f"infos['value']{suffix}", error
    value = info_value(kind, 0)
    assert describe(value[0] if kind in NESTED_IN_LIST else value) in str(error)
    assert words in str(error) and isinstance(error, TypeError)
    for _ in range(2):  # the same value again: refused again, the env never restarted for it
        with pytest.raises(InfoEncodingError, match=r"env 0's infos\['value'\]"):
            envs.step(np.zeros(2, np.int64))
    assert envs.restarts == [0, 0]


@pytest.mark.parametrize("kind", INFO_KINDS)
def test_each_kind_is_carried_exactly_or_refused_by_name(runtime, kind):
    name, backend = runtime
    boundary = RUNTIMES[name]
    envs = _portal(backend, kind, on_env_failure="restart")
    try:
        if kind in EXACT_EVERYWHERE or (kind in PICKLED and boundary is None):
            _carried(envs, kind)
        elif kind in NEVER and boundary is None:
            _refused(envs, kind, "cannot be pickled")
        else:
            _refused(envs, kind, f"cannot cross the {boundary} boundary exactly")
    finally:
        envs.close()


@pytest.mark.parametrize("kind", ["intenum", "namedtuple", "set", "object_array", "datetime64", "subclass_in_list"])
def test_lossy_infos_convert_what_cannot_cross(runtime, kind):
    name, backend = runtime
    if RUNTIMES[name] is None:
        pytest.skip("process and venv runtimes carry these exactly, lossy or not")
    envs = _portal(backend, kind, infos="lossy")
    try:
        _, infos = envs.reset(seed=0)
    finally:
        envs.close()
    value = info_value(kind, 0)
    got = infos["value"][0]
    if kind == "intenum":
        assert infos["value"].dtype == np.int64 and got == int(value)
    elif kind == "namedtuple":
        assert type(got) is tuple and got == tuple(value)
    elif kind == "subclass_in_list":
        assert type(got) is list and type(got[0]) is dict and got == [dict(value[0])]
    else:
        assert got == repr(value)


def test_a_pickle_from_across_a_boundary_is_never_loaded(runtime):
    """An env that makes its own server pickle (it runs in that process): the agent refuses the
    pickle as a protocol error rather than load it, where the runtime is a boundary."""
    name, backend = runtime
    envs = _portal(backend, "intenum", env={"pickling": True})
    try:
        if RUNTIMES[name] is None:
            _, infos = envs.reset(seed=0)
            assert type(infos["value"][0]).__name__ == "InfoStatus"
        else:
            with pytest.raises(portal_shm.errors.ServerProtocolError, match="a pickled value"):
                envs.reset(seed=0)
    finally:
        envs.close()


# -- env hosts: the host is the boundary, whatever its envs' runtime --------------------------------
@pytest.fixture(scope="module")
def host(tmp_path_factory):
    keys = Keys(str(tmp_path_factory.mktemp("keys")))
    process = HostProcess(keys, *EXAMPLE_ENVS)
    yield process, keys
    process.stop()


def _remote(host, kind, **vector_kwargs):
    process, keys = host
    return portal_shm.make_vec(
        ENV,
        3,
        backend="remote",
        hosts=[process.address, process.address],
        counts=[1, 2],
        env_kwargs={"kind": kind},
        vector_kwargs={"autoreset_mode": "SameStep", **vector_kwargs},
        **keys.options(),
    )


@pytest.mark.parametrize("kind", INFO_KINDS)
def test_each_kind_across_an_env_host(host, kind):
    envs = _remote(host, kind)
    expected = SyncVectorEnv([functools.partial(InfoKindsEnv, kind)] * 3, autoreset_mode=AutoresetMode.SAME_STEP)
    try:
        if kind in EXACT_EVERYWHERE:
            assert_same(envs.reset(seed=0)[1], expected.reset(seed=0)[1], "reset infos")
            for t in range(STEPS):
                assert_same(envs.step(np.zeros(3, np.int64))[4], expected.step(np.zeros(3, np.int64))[4], f"step {t}")
        else:
            with pytest.raises(InfoEncodingError) as caught:
                envs.reset(seed=0)
            error = caught.value
            assert error.env_index in (0, 1) and error.key.startswith("infos['value']")
            words = "cannot cross the env host boundary" if kind not in NEVER else "cannot be pickled"
            assert words in str(error), error
    finally:
        envs.close()
        expected.close()


def test_lossy_infos_across_an_env_host(host):
    envs = _remote(host, "intenum", infos="lossy")
    try:
        _, infos = envs.reset(seed=0)
        assert infos["value"].dtype == np.int64 and infos["value"].tolist() == [0, 0, 0]
    finally:
        envs.close()
