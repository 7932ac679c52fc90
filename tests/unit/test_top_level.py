"""The front door: ``portal_shm`` holds the everyday names, ``portal_shm.backends`` and
``portal_shm.errors`` the rest; the names the top level used to hold still import from it, with a
DeprecationWarning (once a name) naming their new place, and are the same objects."""

import importlib
import inspect
import subprocess
import sys
import warnings

import pytest

import portal_shm
from portal_shm import errors

EVERYDAY = {
    "make_vec",
    "make",
    "make_vec_ma",
    "load_tuning",
    "VectorPortal",
    "PortalVectorEnv",
    "Portal",
    "MultiAgentPortal",
    "AgentBatch",
    "RecordVideo",
    "restart_seed",
    "serve",
    "PortalError",
    "EnvError",
    "__version__",
}
BACKENDS = {
    "Backend",
    "ProcessBackend",
    "VenvBackend",
    "MicromambaBackend",
    "DockerBackend",
    "AttachBackend",
    "RemoteBackend",
    "RayBackend",
    "RemoteVectorPortal",
    "RayVectorPortal",
    "HostPolicy",
    "EnvSpec",
}
MOVED = sorted(portal_shm._MOVED.items())


def test_the_top_level_lists_the_everyday_names_and_the_namespaces():
    assert set(portal_shm.__all__) == EVERYDAY
    public = {name for name in dir(portal_shm) if not name.startswith("__")}
    assert public == EVERYDAY - {"__version__"} | {"backends", "errors"}
    for name in portal_shm.__all__:
        assert getattr(portal_shm, name) is not None, name
    assert portal_shm.errors is errors and portal_shm.backends is importlib.import_module("portal_shm.backends")


def test_the_backends_namespace_holds_the_backends_and_portals_of_other_machines():
    backends = importlib.import_module("portal_shm.backends")
    assert set(backends.__all__) == BACKENDS
    assert {name for name in dir(backends) if not name.startswith("__")} == BACKENDS
    for name in BACKENDS:
        assert inspect.isclass(getattr(backends, name)), name
    assert issubclass(backends.DockerBackend, backends.Backend)
    with pytest.raises(AttributeError, match="NoSuchBackend"):
        backends.NoSuchBackend  # noqa: B018


def test_the_errors_namespace_exports_every_error_it_defines():
    defined = {
        name
        for name, value in vars(errors).items()
        if inspect.isclass(value) and issubclass(value, Exception) and value.__module__ == errors.__name__
    }
    assert set(errors.__all__) == defined


def test_every_moved_name_is_in_its_namespace():
    assert {name for name, place in MOVED if place == "backends"} == BACKENDS
    newer = {"DockerUnavailableError"}  # (in portal_shm.errors since, never a top-level name)
    assert {name for name, place in MOVED if place == "errors"} == set(errors.__all__) - EVERYDAY - newer


@pytest.mark.parametrize(("name", "place"), MOVED, ids=[name for name, _ in MOVED])
def test_an_old_top_level_name_warns_once_naming_its_new_place_and_is_the_same_object(name, place, monkeypatch):
    monkeypatch.setattr(portal_shm, "_warned", set())
    namespace = importlib.import_module(f"portal_shm.{place}")
    with pytest.warns(DeprecationWarning) as record:
        value = getattr(portal_shm, name)
    assert value is getattr(namespace, name)
    assert len(record) == 1 and f"portal_shm.{place}.{name}" in str(record[0].message)
    assert record[0].filename == __file__  # (the caller's line, not portal_shm's)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert getattr(portal_shm, name) is value  # once a name


def test_an_old_from_import_still_works_and_warns(monkeypatch):
    monkeypatch.setattr(portal_shm, "_warned", set())
    with pytest.warns(DeprecationWarning, match=r"portal_shm\.backends\.DockerBackend"):
        from portal_shm import DockerBackend
    with pytest.warns(DeprecationWarning, match=r"portal_shm\.errors\.HostLostError"):
        from portal_shm import HostLostError
    from portal_shm.backends import DockerBackend as new_place

    assert DockerBackend is new_place and HostLostError is errors.HostLostError
    with pytest.raises(AttributeError, match="NoSuchName"):
        portal_shm.NoSuchName  # noqa: B018


def test_importing_the_namespaces_imports_no_heavy_dependency():
    heavy = ("ray", "docker", "rich", "gymnasium", "torch")
    code = f"import sys, portal_shm.backends, portal_shm.errors; print([m for m in {heavy!r} if m in sys.modules])"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.strip() == "[]", done.stdout
