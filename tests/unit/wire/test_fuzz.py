"""Fuzzing every decoder that reads what the other side of the isolation boundary sent.

Agent side: raw bytes and well-formed-but-hostile messages through ``protocol.unpackb`` and the
checks of ``validate`` (handshakes, replies, errors, infos blobs, space schemas): the only
exception that may come out is ``ServerProtocolError``. Server side: the env server's control
handler, driven through a real ZeroMQ socket pair with arbitrary messages: it answers every one
with a reply or an error message and never raises. Case counts come from the hypothesis profile
(``tests/conftest.py``): 2,000 per byte-level test and 250 per structured one in CI (about
6,000 cases, well under a minute), 25x as many with ``--hypothesis-profile=long``.
"""

import msgpack
import pytest
import zmq
from hypothesis import given, settings
from hypothesis import strategies as st

from portal_shm.agent.contract import validate as V
from portal_shm.errors import ServerProtocolError
from portal_shm.wire import protocol as P

pytestmark = pytest.mark.slow  # fuzzing: thousands of cases a test (the hypothesis profile's)

texts = st.text(max_size=12)
atoms = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**64) + 1, 2**64 - 1), st.floats(), texts, st.binary(max_size=16)
)
values = st.recursive(
    atoms,
    lambda c: st.one_of(st.lists(c, max_size=4), st.dictionaries(st.one_of(texts, st.integers(-3, 40)), c, max_size=4)),
    max_leaves=16,
)
KINDS = ["Box", "Discrete", "MultiDiscrete", "MultiBinary", "Dict", "Tuple", "Text", "Opaque", "Nope"]
DTYPES = ["<f4", "<f8", "|u1", "<i8", "|b1", "|O", "<c8", "<U3", "V8", "xx", 5]
# Structured cases cost far more to generate than byte strings: an eighth of the profile's count.
structured = settings(max_examples=max(50, settings().max_examples // 8))


def _packed(value) -> bytes:
    try:
        return P.packb(value)
    except (OverflowError, TypeError, ValueError):
        return b""


def schemas(depth=0):
    """Mostly plausible space descriptions with hostile values in any field."""
    shape = st.lists(st.one_of(st.integers(-2, 6), st.integers(2**20, 2**45), atoms), max_size=4)
    leaf = st.fixed_dictionaries(
        {"kind": st.sampled_from(KINDS)},
        optional={
            "dtype": st.sampled_from(DTYPES),
            "shape": shape,
            "n": st.one_of(st.integers(-3, 2**63), shape, atoms),
            "start": st.one_of(st.integers(-5, 5), atoms),
            "low": st.one_of(st.floats(), st.integers(-9, 9), atoms),
            "high": st.one_of(st.floats(), st.integers(-9, 9), atoms),
            "nvec": st.one_of(st.lists(st.integers(-2, 9), max_size=3), atoms),
            "min_length": st.one_of(st.integers(-2, 9), atoms),
            "max_length": st.one_of(st.integers(-2, 99), atoms),
            "charset": st.one_of(texts, atoms),
            "name": atoms,
            "repr": atoms,
        },
    )
    if depth >= 3:
        return leaf
    sub = st.deferred(lambda: schemas(depth + 1))
    return st.one_of(
        leaf,
        st.fixed_dictionaries(
            {"kind": st.just("Dict"), "spaces": st.lists(st.tuples(texts, sub).map(list), max_size=3)}
        ),
        st.fixed_dictionaries({"kind": st.just("Tuple"), "spaces": st.lists(sub, max_size=3)}),
        values,
    )


def _only_protocol_errors(check, *args):
    try:
        check(*args)
    except ServerProtocolError:
        pass


@given(st.binary(max_size=300))
def test_agent_decodes_raw_bytes_to_a_value_or_protocol_error(data):
    try:
        P.unpackb(data)
    except P.ProtocolError:
        pass


@given(st.lists(st.tuples(st.sampled_from([1, 2, 3, 3, 3, 5, 7, 127]), st.binary(max_size=40)), min_size=1, max_size=6))
def test_nested_extension_types_never_escape_as_other_errors(exts):
    data = msgpack.packb([])
    for code, extra in exts:  # tuples of tuples of arrays of ...: built inside out
        data = msgpack.packb(msgpack.ExtType(code, data if code == 3 else extra))
    try:
        P.unpackb(data)
    except P.ProtocolError:
        pass


@structured
@given(schemas())
def test_space_schemas_rebuild_or_raise_protocol_error(schema):
    _only_protocol_errors(V.space_from_schema, schema)


@structured
@given(
    st.dictionaries(
        st.sampled_from(["protocol", "observation_spaces", "action_spaces", "metadata", "render_mode", "x"]),
        st.one_of(values, st.lists(schemas(), max_size=3)),
        max_size=6,
    ),
    st.integers(1, 3),
)
def test_handshakes_are_checked(message, env_count):
    _only_protocol_errors(V.check_hello, message, env_count, "env server 0")


@structured
@given(st.dictionaries(st.sampled_from(["extras", "results", "blobs", "cmd"]), values, max_size=4))
def test_replies_and_blobs_are_checked(message):
    _only_protocol_errors(V.check_reply, message, [2, 3], "env server 1")
    _only_protocol_errors(V.check_blobs, message.get("blobs"), [2, 3], "env server 1")


@structured
@given(st.dictionaries(st.sampled_from(["env_index", "phase", "type", "message", "traceback"]), values, max_size=5))
def test_error_messages_are_clipped_and_blame_only_own_envs(message):
    env_index, phase, error_type, text, remote_traceback = V.check_error(message, [4, 5])
    assert env_index in (None, 4, 5)
    assert all(isinstance(x, str) and len(x) <= V.MAX_TEXT + 20 for x in (phase, error_type, text, remote_traceback))


@structured
@given(st.one_of(st.binary(max_size=64), values.map(_packed)))
def test_infos_blobs_decode_or_raise_protocol_error(blob):
    _only_protocol_errors(V.decode_infos, blob, 0)


@pytest.fixture(scope="module")
def env_server(tmp_path_factory):
    """A real EnvServer with a real env, reached through a real ZeroMQ socket (no ring)."""
    from portal_shm.server.example_envs import NestedEnv
    from portal_shm.server.loop import EnvServer

    address = f"ipc://{tmp_path_factory.mktemp('fuzz')}/s.ctl"
    context = zmq.Context()
    agent = context.socket(zmq.DEALER)
    agent.setsockopt(zmq.LINGER, 0)
    agent.bind(address)
    server = EnvServer({"env_indices": [0], "server_index": 0, "control_address": address}, [NestedEnv()])
    yield server, agent
    server.cleanup(agent_gone=False)
    agent.close(0)
    context.term()


COMMANDS = [P.RESET, P.CALL, P.SET_ATTR, P.RENDER, "hello", "nope", 5, None]


@structured
@given(
    st.fixed_dictionaries(
        {"cmd": st.sampled_from(COMMANDS)},
        optional={
            "slot": values,
            "prev_slot": values,
            "seeds": values,
            "options": values,
            "mask": values,
            "name": st.one_of(
                st.sampled_from(["np_random", "t", "render_mode", "episode_length", "spec"]), texts, atoms
            ),
            "args": values,
            "kwargs": values,
            "values": values,
        },
    )
)
def test_env_server_answers_any_control_message_without_raising(env_server, message):
    server, agent = env_server
    assert server.control(message) is True
    assert agent.poll(5000)
    reply = P.unpackb(agent.recv())
    assert reply["cmd"] in (P.REPLY, P.ERROR)
    while agent.poll(0):  # nothing else may be left behind for the next message
        raise AssertionError(f"second reply {P.unpackb(agent.recv())!r:.200}")
