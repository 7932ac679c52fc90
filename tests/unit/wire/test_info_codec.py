"""The infos codec (``wire/info_codec.py``) and the agent's side of it, without processes: each
kind of value in each mode, the key paths refusals name, what the agent loads and from whom."""

import collections

import numpy as np
import pytest

from portal_shm import errors as E
from portal_shm.agent.contract.options import VectorOptions
from portal_shm.agent.contract.validate import decode_infos, info_refusal
from portal_shm.remote import error_data
from portal_shm.remote.infos import crossing
from portal_shm.runtimes.attach import AttachBackend
from portal_shm.runtimes.docker import DockerBackend
from portal_shm.runtimes.micromamba import MicromambaBackend
from portal_shm.runtimes.process import ProcessBackend
from portal_shm.runtimes.venv import VenvBackend
from portal_shm.server.example_envs import INFO_KINDS, InfoStatus, info_value
from portal_shm.server.loop import error_message
from portal_shm.wire import protocol as P
from portal_shm.wire.info_codec import LOSSY, PICKLE, REFUSE, InfoCodec, InfoRefused, check_crossing
from testkit.compare import assert_same

PLAIN = {"n": 1, "f": 0.5, "a": np.arange(3, dtype=np.int16), "s": np.float32(2), "t": (1, [np.uint8(3)])}
INEXACT = [k for k in INFO_KINDS if k not in ("plain", "numpy", "batched_subclass")]


def _decoded(blob, unpickle):
    infos, obs, columns = decode_infos(blob, 0, unpickle)
    return infos


@pytest.mark.parametrize("mode", [PICKLE, REFUSE, LOSSY])
def test_plain_infos_pack_as_protocol_packs_them(mode):
    """What msgpack carries exactly costs nothing new: the very bytes ``packb`` gives."""
    codec = InfoCodec(mode)
    assert codec.entry(0, [PLAIN]) == P.packb([[PLAIN], None])
    assert codec.entry(0, [PLAIN], {"obs": 1}, {"c": [1, 2]}) == P.packb([[PLAIN], {"obs": 1}, {"c": [1, 2]}])


@pytest.mark.parametrize("kind", [k for k in INFO_KINDS if k != "unpicklable"])
def test_pickle_mode_carries_every_picklable_kind_exactly(kind):
    info = {"value": info_value(kind, 2), "nested": {"deeper": [info_value(kind, 3)]}}
    assert_same(_decoded(InfoCodec(PICKLE).entry(0, [info]), True), [info], kind)


@pytest.mark.parametrize("kind", INEXACT)
def test_refuse_mode_names_env_key_and_type(kind):
    info = {"plain": 1, "stats": {"when": info_value(kind, 2)}}
    with pytest.raises(InfoRefused) as caught:
        InfoCodec(REFUSE).entry(7, [info])
    key = caught.value.detail["key"]
    assert caught.value.env_index == 7 and key.startswith("infos['stats']['when']"), key
    assert caught.value.detail["kind"] == P.KIND_INFO_ENCODING and caught.value.detail["cause"] == "boundary"


def test_refusals_name_keys_of_dicts_and_items_of_lists():
    codec = InfoCodec(REFUSE)
    for info, key in [
        ({"a": [1, (2, {InfoStatus.DONE: 1})]}, "infos['a'][1][1][<InfoStatus.DONE: 1>] (its key)"),
        ({"final_info": {"end_status": InfoStatus.DONE}}, "infos['final_info']['end_status']"),
        ({"big": [2**70]}, "infos['big'][0]"),
    ]:
        with pytest.raises(InfoRefused) as caught:
            codec.entry(0, [{}, info])
        assert caught.value.detail["key"] == key
    with pytest.raises(InfoRefused, match=r"is an enum.IntEnum \(portal_shm.example_envs.info_kinds.InfoStatus\)"):
        codec.entry(3, [{"end_status": InfoStatus.DONE}])


def test_subclasses_that_batching_flattens_cross_as_their_base():
    """An OrderedDict of infos or a masked array on the dicts' chain: SyncVectorEnv's batch holds
    the plain dict or array too. Inside a list it stays what it is, so it is refused there."""
    info = collections.OrderedDict(n=1, m=np.ma.masked_array([1, 2], mask=[True, False]), d=collections.Counter(a=1))
    (decoded,) = _decoded(InfoCodec(REFUSE).entry(0, [info]), False)
    assert_same(decoded, {"n": 1, "m": np.array([1, 2]), "d": {"a": 1}})
    with pytest.raises(InfoRefused, match=r"infos\['x'\]\[0\] is a collections.OrderedDict"):
        InfoCodec(REFUSE).entry(0, [{"x": [collections.OrderedDict(a=1)]}])


def test_lossy_mode_converts():
    info = {"e": InfoStatus.DONE, "p": info_value("namedtuple", 1), "s": {1}, "big": 2**70, "ok": np.int8(1)}
    (decoded,) = _decoded(InfoCodec(LOSSY).entry(0, [info]), False)
    assert_same(decoded, {"e": 1, "p": (1, -1), "s": "{1}", "big": repr(2**70), "ok": np.int8(1)})


def test_what_pickle_cannot_take_is_refused_by_name_even_unfenced():
    with pytest.raises(InfoRefused, match=r"env 2's infos\['x'\]\['lock'\] is a _thread.lock, which cannot be pickled"):
        InfoCodec(PICKLE).entry(2, [{"x": {"lock": info_value("unpicklable", 0)}}])


def test_huge_ints_go_as_one_pickle_where_pickles_may():
    info = {"big": 2**70, "e": InfoStatus.DONE}
    assert_same(_decoded(InfoCodec(PICKLE).entry(0, [info]), True), [info])


def test_the_agent_loads_pickles_only_from_servers_that_are_no_boundary():
    blob = InfoCodec(PICKLE).entry(0, [{"e": InfoStatus.DONE}])
    with pytest.raises(E.ServerProtocolError, match="a pickled value"):
        decode_infos(blob, 0, False)
    nested = P.new_packer(lambda o: P.tuple_ext(P.packb([1])) if type(o) is tuple else o).pack([[{"t": (1,)}], None])
    assert decode_infos(nested, 0, False)[0] == [{"t": (1,)}]


def test_a_pickle_the_agent_cannot_load_is_an_info_error():
    """A venv's env may return an instance of a class only that venv has."""
    module = InfoStatus.__module__.encode()
    blob = InfoCodec(PICKLE).entry(4, [{"x": InfoStatus.DONE}]).replace(module, b"n" * len(module))
    with pytest.raises(E.InfoEncodingError, match="cannot unpickle .*No module named 'nnnn") as caught:
        decode_infos(blob, 4, True)
    assert caught.value.env_index == 4 and not isinstance(caught.value, E.ServerProtocolError)


def test_a_refusal_reaches_the_agent_as_an_info_error_with_the_runtime_boundary():
    try:
        InfoCodec(REFUSE).entry(3, [{"end_status": InfoStatus.DONE}])
    except InfoRefused as exc:
        message = error_message(exc, 3, "step")
    error = info_refusal(P.unpackb(P.packb(message)), 3, "step", "container", "docker container x")
    assert isinstance(error, E.InfoEncodingError) and isinstance(error, E.EnvError) and isinstance(error, TypeError)
    text = str(error)
    assert text.startswith(
        "env 3's infos['end_status'] is an enum.IntEnum (portal_shm.example_envs.info_kinds.InfoStatus)"
    )
    assert "container boundary" in text and "infos': 'lossy'" in text
    assert "docker container x" in text


def test_env_errors_with_a_detail_of_their_own_are_plain_env_errors():
    class HttpError(Exception):
        detail = "not found"  # (an env's exception may have any attribute)

    message = error_message(HttpError("x"), 1, "step")
    assert "kind" not in message and message["message"] == "x"


def test_an_env_host_refuses_by_name_or_converts_for_its_agent():
    sparse = [[0, {"ok": 1}], [1, {"stats": {"e": InfoStatus.RUNNING}}]]
    with pytest.raises(E.InfoEncodingError) as caught:
        crossing(sparse, False, "step", env_ids=[4, 5])
    assert caught.value.env_index == 5 and caught.value.key == "infos['stats']['e']"
    assert "env host boundary" in str(caught.value)
    assert crossing(sparse, True, "step") == [[0, {"ok": 1}], [1, {"stats": {"e": 0}}]]
    assert check_crossing(0, {"ok": [1, (2,)]}, False) == {"ok": [1, (2,)]}


def test_an_info_error_from_a_host_keeps_its_fields_and_env_numbering():
    error = E.InfoEncodingError(1, "step", "infos['e']", "a set", "send list(value) instead", "boundary", "env host")
    rebuilt = error_data.from_data(P.unpackb(P.packb(error_data.to_data(error, "process"))), "h:1", 10, 4)
    assert isinstance(rebuilt, E.InfoEncodingError) and rebuilt.env_index == 11 and rebuilt.key == "infos['e']"
    assert "env 11's infos['e'] is a set" in str(rebuilt)


def test_which_runtimes_are_trust_boundaries():
    assert ProcessBackend().trust_boundary() is None
    assert VenvBackend().trust_boundary() is None
    assert MicromambaBackend(spec=__file__).trust_boundary() is None
    assert DockerBackend(image="x").trust_boundary() == "container"
    assert AttachBackend(address="ipc:///tmp/x").trust_boundary() == "listener"


def test_the_infos_option_is_checked():
    assert VectorOptions.of(2, {"infos": "lossy"}).infos == "lossy"
    with pytest.raises(ValueError, match=r"vector_kwargs infos='pickle': give one of 'exact', 'lossy'"):
        VectorOptions.of(2, {"infos": "pickle"})
