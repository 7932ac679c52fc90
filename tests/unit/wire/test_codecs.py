"""The wire format, the space schema and the ring layout, including hostile input."""

import ast
import pathlib
import subprocess
import sys

import gymnasium as gym
import msgpack
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import portal_shm
from portal_shm.agent.contract.spaces import schema_to_space
from portal_shm.runtimes.env_wheel import server_modules
from portal_shm.wire import protocol as P
from portal_shm.wire.layout import ALIGN, field_views, ring_layout
from portal_shm.wire.schema import space_to_schema
from testkit.compare import assert_same

SAFE_DTYPES = st.sampled_from([np.uint8, np.int8, np.int32, np.int64, np.float32, np.float64, np.bool_, np.complex64])
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**64 - 1),
    st.floats(allow_nan=False),
    st.text(max_size=20),
    st.binary(max_size=20),
)
arrays = hnp.arrays(SAFE_DTYPES, hnp.array_shapes(min_dims=0, max_dims=3, max_side=4))
values = st.recursive(
    st.one_of(scalars, arrays),
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.tuples(children, children),
        st.dictionaries(st.text(max_size=8), children, max_size=4),
    ),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None)
@given(values)
def test_roundtrip_keeps_types_dtypes_and_values(value):
    assert_same(P.unpackb(P.packb(value)), value)


@settings(max_examples=2000, deadline=None)
@given(st.binary(max_size=200))
def test_garbage_never_escapes_as_anything_but_protocol_error(data):
    try:
        P.unpackb(data)
    except P.ProtocolError:
        pass


@settings(max_examples=500, deadline=None)
@given(st.integers(0, 127), st.binary(max_size=64))
def test_hostile_extension_payloads_are_rejected_cleanly(code, payload):
    try:
        P.unpackb(msgpack.packb(msgpack.ExtType(code, payload)))
    except P.ProtocolError:
        pass


def test_object_arrays_are_refused_both_ways():
    with pytest.raises(TypeError, match="object arrays"):
        P.packb(np.array([object()], dtype=object))
    forged = msgpack.ExtType(1, msgpack.packb(["|O", [1]]) + b"\0" * 8)
    with pytest.raises(P.ProtocolError, match="not allowed"):
        P.unpackb(msgpack.packb(forged))


def test_payload_size_must_match_the_declared_shape():
    forged = msgpack.ExtType(1, msgpack.packb(["<f8", [1000000]]) + b"\0" * 8)
    with pytest.raises(P.ProtocolError, match="does not match"):
        P.unpackb(msgpack.packb(forged))


def test_arbitrary_objects_cannot_be_sent():
    with pytest.raises(TypeError, match="cannot cross the isolation boundary"):
        P.packb({"x": object()})


class Registered(gym.Env):
    """An env registered by its class, not by a path (``gym.register(id, entry_point=cls)``)."""


def test_gymnasiums_env_spec_crosses_as_data_and_comes_back_equal():
    """``env.spec`` (``get_attr("spec")``): its fields, entry points as ``module:name`` paths."""
    wrapped = gym.wrappers.ClipReward(gym.make("CartPole-v1", render_mode="rgb_array"), 0.0, 0.5)
    spec = wrapped.spec
    assert spec.additional_wrappers and spec.kwargs == {"render_mode": "rgb_array"}
    assert P.unpackb(P.packb({"specs": [spec, (spec,)]})) == {"specs": [spec, (spec,)]}
    assert P.unpackb(P.packb(spec), unpickle=True) == spec
    by_class = gym.envs.registration.EnvSpec("Registered-v0", entry_point=Registered, max_episode_steps=3)
    back = P.unpackb(P.packb(by_class))
    assert back.entry_point == f"{__name__}:Registered" and back.max_episode_steps == 3
    with pytest.raises(TypeError, match="cannot cross"):  # its kwargs are sent as any value is
        P.packb(gym.envs.registration.EnvSpec("X-v0", kwargs={"f": object()}))


def test_an_env_spec_is_rebuilt_only_from_checked_fields(monkeypatch):
    fields = P.env_spec_fields(gym.spec("CartPole-v1"))
    for bad in ({**fields, "id": 3}, {**fields, "extra": 1}, {**fields, "additional_wrappers": [[1, 2]]}, []):
        with pytest.raises(P.ProtocolError):
            P.unpackb(msgpack.packb(msgpack.ExtType(5, msgpack.packb(bad))))
    with pytest.raises(P.ProtocolError, match="gymnasium refuses"):
        P.unpackb(msgpack.packb(msgpack.ExtType(5, msgpack.packb({**fields, "id": "a/b/c-v1-v2"}))))
    monkeypatch.setitem(sys.modules, "gymnasium.envs.registration", None)  # an env runtime without gymnasium
    assert P.unpackb(msgpack.packb(msgpack.ExtType(5, msgpack.packb(fields)))) == fields


SPACES = [
    gym.spaces.Box(0, 255, (210, 160, 3), np.uint8),
    gym.spaces.Box(np.array([-1.0, 0.0]), np.array([1.0, 2.0]), dtype=np.float64),
    gym.spaces.Discrete(7, start=-2),
    gym.spaces.MultiDiscrete([[2, 3], [4, 5]], start=[[0, 1], [1, 0]]),
    gym.spaces.MultiBinary([2, 3]),
    gym.spaces.Dict(
        {"a": gym.spaces.Tuple((gym.spaces.Discrete(2), gym.spaces.MultiBinary(3))), "b": gym.spaces.Box(-1, 1, (2,))}
    ),
    gym.spaces.Text(8, min_length=2),
    gym.spaces.Graph(gym.spaces.Box(-1, 1, (2,)), gym.spaces.Discrete(3)),
    gym.spaces.Sequence(gym.spaces.Dict({"a": gym.spaces.Discrete(2)}), stack=True),
    gym.spaces.OneOf([gym.spaces.Discrete(3), gym.spaces.Box(0, 1, (2,))]),
]


@pytest.mark.parametrize("space", SPACES, ids=lambda s: type(s).__name__)
def test_space_schema_roundtrip(space):
    assert schema_to_space(P.unpackb(P.packb(space_to_schema(space)))) == space


class MissionSpace(gym.Space):
    """A custom space without a portable description (as MiniGrid's)."""


def test_spaces_without_a_portable_description_become_remote_spaces():
    from portal_shm.agent.contract.spaces import RemoteSpace

    space = schema_to_space(space_to_schema(MissionSpace()))
    assert isinstance(space, RemoteSpace) and "MissionSpace" in space.name
    assert space == schema_to_space(space_to_schema(MissionSpace()))
    with pytest.raises(ValueError, match="invalid space schema"):
        schema_to_space("Box")


@pytest.mark.parametrize("space", SPACES[6:], ids=lambda s: type(s).__name__)
def test_revive_restores_what_msgpack_flattens(space):
    from portal_shm.wire.schema import revive

    space.seed(1)
    value = space.sample()
    rebuilt = schema_to_space(space_to_schema(space))
    assert revive(rebuilt, P.unpackb(P.packb(value))) in space


def test_layout_aligns_every_field_and_views_match_spaces():
    obs = space_to_schema(SPACES[5])
    act = space_to_schema(gym.spaces.Discrete(3))
    layout = ring_layout(obs, act, num_envs=5, depth=3, num_servers=2, info_capacity=100)
    assert all(field["offset"] % ALIGN == 0 for field in layout["fields"])
    views = field_views(layout, bytearray(layout["size"]))
    assert views["obs.0"].shape == (3, 5) and views["obs.1"].shape == (3, 5, 3)
    assert views["obs.2"].shape == (3, 5, 2) and views["act.0"].dtype == np.int64
    assert views["info"].shape == (3, 5, 100)


def test_layout_outside_the_segment_is_refused():
    layout = ring_layout(space_to_schema(SPACES[0]), space_to_schema(SPACES[2]), 2, 2, 1, 64)
    with pytest.raises(ValueError, match="outside"):
        field_views(layout, bytearray(layout["size"] // 2))


ENV_SIDE = sorted(server_modules())


@pytest.mark.parametrize("module", ENV_SIDE)
def test_env_side_modules_parse_as_python_3_9(module):
    source = pathlib.Path(server_modules()[module]).read_text()
    ast.parse(source, feature_version=(3, 9))
    assert "from __future__ import annotations" in source


def test_env_side_is_the_wire_and_server_folders():
    assert {
        "__init__.py",
        "presets.py",
        "server/__main__.py",
        "server/startup.py",
        "server/loop.py",
        "wire/protocol.py",
        "wire/ring.py",
        "wire/launch.py",
    } <= set(ENV_SIDE)
    assert not any(name.startswith(("agent/", "runtimes/", "cli/")) for name in ENV_SIDE)


def test_env_side_holds_every_module_of_its_folders_subfolders_included():
    package = pathlib.Path(portal_shm.__file__).parent
    on_disk = {
        path.relative_to(package).as_posix()
        for folder in ("server", "wire", "example_envs")
        for path in (package / folder).rglob("*.py")
        if "__pycache__" not in path.parts
    }
    assert "server/multi_agent/parallel_adapter.py" in on_disk and "server/state/blob.py" in on_disk
    assert "example_envs/plain.py" in on_disk  # (what portal_shm.server.example_envs re-exports)
    assert on_disk <= set(ENV_SIDE), sorted(on_disk - set(ENV_SIDE))


def test_env_side_imports_no_agent_dependencies():
    code = (
        "import sys, portal_shm.server; bad = {'gymnasium', 'rich', 'docker'} & set(sys.modules); assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
