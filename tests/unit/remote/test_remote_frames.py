"""The host link's message format: exact round trips under every codec, and garbage only ever FrameError."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from portal_shm.remote import codecs, frames
from portal_shm.remote.infos import batch, unbatch
from portal_shm.remote.reliable import Sequencer
from portal_shm.wire import protocol as P

CODECS = ["none"] + codecs.available()
DTYPES = st.sampled_from([np.uint8, np.int8, np.int32, np.int64, np.float32, np.float64, np.bool_])


def test_both_codecs_are_installed_in_dev():
    assert set(codecs.available()) == {"lz4", "zstd"}


@pytest.mark.parametrize("codec", CODECS)
@settings(max_examples=300)
@given(
    arrays=st.lists(
        DTYPES.flatmap(lambda d: hnp.arrays(d, hnp.array_shapes(min_dims=0, max_dims=4, max_side=40))), max_size=4
    )
)
def test_arrays_round_trip_exactly(codec, arrays):
    stats = frames.WireStats()
    header, out = frames.unpack(frames.pack({"cmd": "x", "n": 1}, arrays, codec), stats)
    assert header == {"cmd": "x", "n": 1}
    assert len(out) == len(arrays)
    for a, b in zip(arrays, out):
        assert a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_array_equal(a, b)
    assert stats.raw_bytes == sum(a.nbytes for a in arrays)


@pytest.mark.parametrize("codec", codecs.available())
def test_image_frames_compress_and_noise_goes_raw(codec):
    frame = np.zeros((8, 210, 160, 3), np.uint8)
    frame[:, 30:50, 40:60] = 200
    noise = np.random.default_rng(0).integers(0, 256, (4, 84, 84), dtype=np.uint8)
    stats = frames.WireStats()
    message = frames.pack({"cmd": "batch"}, [frame, noise, np.ones(8)], codec, stats, compressible=2)
    specs = P.unpackb(message[0])["arrays"]
    assert [spec[2] for spec in specs[:2]] == [codec, "none"]  # noise does not pay
    assert specs[2][2] == frames.INLINE and len(message) == 3  # small arrays ride in the header
    assert len(message[1]) < frame.nbytes / 50
    _, out = frames.unpack(message)
    np.testing.assert_array_equal(out[0], frame)
    assert stats.as_dict()["ratio"] > 2


@pytest.mark.parametrize("codec", codecs.available())
def test_compressed_frames_decompress_into_the_arrays_given(codec):
    frame = np.zeros((8, 210, 160, 3), np.uint8)
    frame[:, 30:50, 40:60] = 200
    flags = np.arange(8.0)
    message = frames.pack({"cmd": "result"}, [frame, flags], codec, compressible=1)
    target = np.full_like(frame, 7)
    _, out = frames.unpack(message, into=[target])
    assert out[0] is target
    np.testing.assert_array_equal(target, frame)
    np.testing.assert_array_equal(out[1], flags)
    _, out = frames.unpack(message, into=[np.empty((4, 210, 160, 3), np.uint8)])  # another shape: fresh
    np.testing.assert_array_equal(out[0], frame)


@pytest.mark.parametrize("codec", codecs.available())
@pytest.mark.parametrize("size", [10, 4000, 4096, 5000])
def test_frames_that_do_not_fill_the_given_array_exactly_are_refused(codec, size):
    data = codecs.compress(codec, memoryview(np.zeros(4096, np.uint8)))
    spec = ["|u1", [size], codec]
    with pytest.raises(frames.FrameError):
        if size == 4096:
            data = data[: len(data) // 2]  # cut short
        frames.unpack([P.packb({"cmd": "x", "arrays": [spec]}), data], into=[np.empty(size, np.uint8)])


@given(data=st.lists(st.binary(max_size=200), min_size=1, max_size=4))
def test_garbage_only_raises_frame_error(data):
    try:
        frames.unpack(data)
    except frames.FrameError:
        pass


@pytest.mark.parametrize(
    "spec, frame",
    [
        (["|O", [1], "none"], b"\0" * 8),  # objects never cross
        (["<f8", [2], "none"], b"\0" * 8),  # size does not match the shape
        (["<f8", [-1], "none"], b""),
        (["|u1", [10**6], "lz4"], b"\x00\x01"),  # a bomb that does not decompress to its size
        (["|u1", [4], "zip"], b"abcd"),  # a codec nobody offered
    ],
)
def test_lying_specs_are_refused(spec, frame):
    with pytest.raises(frames.FrameError):
        frames.unpack([P.packb({"cmd": "x", "arrays": [spec]}), frame])


@pytest.mark.parametrize(
    "spec",
    [
        ["<f8", [2], "inline", b"\0" * 8],  # too few bytes for the shape
        ["<f8", [1], "inline", "12345678"],  # not bytes
        ["|O", [1], "inline", b"\0" * 8],  # objects never cross
        ["<f8", [-1], "inline", b""],
    ],
)
def test_lying_inline_arrays_are_refused(spec):
    with pytest.raises(frames.FrameError):
        frames.unpack([P.packb({"cmd": "x", "arrays": [spec]})])


def test_infos_cross_hosts_as_one_process_batches_them():
    from portal_shm.agent.contract.infos import add_info

    per_env = [{"a": 1, "flag": True}, {}, {"a": 2.5, "nested": {"x": np.float32(3)}}, {"obj": [1, 2]}]
    total: dict = {}
    for i, info in enumerate(per_env):
        total = add_info(total, info, i, 4)
    host_a = {}
    for i, info in enumerate(per_env[:2]):
        host_a = add_info(host_a, info, i, 2)
    host_b = {}
    for i, info in enumerate(per_env[2:]):
        host_b = add_info(host_b, info, i, 2)
    wire = [P.unpackb(P.packb(unbatch(part, 2))) for part in (host_a, host_b)]
    rebuilt = batch(wire[0], np.arange(0, 2), 4, "a")
    rebuilt = batch(wire[1], np.arange(2, 4), 4, "b", rebuilt)
    from testkit.compare import assert_same

    assert_same(rebuilt, total)


INFO_KINDS = [
    st.integers(-(2**40), 2**40),
    st.integers(-(2**40), 2**40).map(np.int64),
    st.integers(-100, 100).map(np.int32),
    st.floats(-1e6, 1e6).map(np.float64),
    st.floats(-1e6, 1e6),
    st.floats(-1e3, 1e3).map(np.float32),
    st.booleans(),
    st.booleans().map(np.bool_),
    st.text(max_size=3),
    hnp.arrays(np.int64, (2,)),
]


@st.composite
def env_infos(draw):
    """Infos of 1-5 envs as a real env gives them: each key always of one kind, present or not."""
    kinds = {key: draw(st.sampled_from(INFO_KINDS)) for key in ("a", "b", "nested")}
    per_env = []
    for _ in range(draw(st.integers(1, 5))):
        info = {key: draw(kind) for key, kind in kinds.items() if key != "nested" and draw(st.booleans())}
        if draw(st.booleans()):
            info["nested"] = {"x": draw(kinds["nested"])}
        per_env.append(info)
    return per_env


@settings(max_examples=300, deadline=None)
@given(per_env=env_infos(), split=st.integers(0, 5))
def test_infos_cross_hosts_with_the_values_and_dtypes_of_one_process(per_env, split):
    from portal_shm.agent.contract.infos import add_info
    from testkit.compare import assert_same

    n = len(per_env)
    split = min(split, n)
    total: dict = {}
    for i, info in enumerate(per_env):
        total = add_info(total, info, i, n)
    rebuilt: dict = {}
    for lo, hi in ((0, split), (split, n)):
        part: dict = {}
        for i, info in enumerate(per_env[lo:hi]):
            part = add_info(part, info, i, hi - lo)
        rebuilt = batch(P.unpackb(P.packb(unbatch(part, hi - lo))), np.arange(lo, hi), n, "host", rebuilt)
    assert_same(rebuilt, total)


def test_sequencer_drops_duplicates_and_keeps_what_is_unacknowledged():
    sender, receiver = Sequencer(), Sequencer()
    headers = [sender.stamp({"cmd": "step"}) for _ in range(3)]
    for header in headers:
        sender.keep(header["seq"], [header])
    assert [receiver.accept(h["seq"]) for h in headers + headers[:1]] == [True, True, True, False]
    assert not receiver.accept(9)
    sender.acknowledged(receiver.received - 1)
    assert sender.behind and [f[0]["seq"] for f in sender.unacknowledged()] == [3]
    sender.acknowledged(3)
    assert not sender.behind and sender.unacknowledged() == []
    sender.acknowledged("junk")
    sender.acknowledged(99)
    assert sender.peer_ack == 3


def test_auto_compresses_images_with_zstd_off_loopback_and_lz4_on_it():
    import gymnasium as gym

    from portal_shm.wire.schema import space_to_schema

    frame = space_to_schema(gym.spaces.Dict({"screen": gym.spaces.Box(0, 255, (60, 80, 3), np.uint8)}))
    vector = space_to_schema(gym.spaces.Box(-1, 1, (4,), np.float32))
    assert codecs.is_image(frame) and not codecs.is_image(vector)
    assert codecs.agent_offer("auto", loopback=True) == ["lz4"] and codecs.agent_offer("none", loopback=False) == []
    offer = codecs.agent_offer("auto", loopback=False)
    assert codecs.host_choice(offer, "auto", image_obs=True) == "zstd"
    assert codecs.host_choice(offer, "auto", image_obs=False) == "none"
    assert codecs.host_choice(["lz4"], "lz4", image_obs=False) == "lz4"  # forced: even for vectors
    assert codecs.host_choice(["brotli"], "brotli", image_obs=True) == "none"


@pytest.mark.parametrize("codec", codecs.available())
def test_codecs_can_be_used_from_many_threads_at_once(codec):
    from concurrent.futures import ThreadPoolExecutor

    rng = np.random.default_rng(0)
    frames_ = [np.repeat(rng.integers(0, 256, (1, 160, 3), dtype=np.uint8), 210, axis=0) for _ in range(16)]

    def round_trip(frame):
        for _ in range(50):
            _, [out] = frames.unpack(frames.pack({"cmd": "x"}, [frame], codec))
            assert np.array_equal(out, frame)
        return True

    with ThreadPoolExecutor(8) as pool:
        assert all(pool.map(round_trip, frames_))


# -- what a host refuses before it decodes (issue 35) -------------------------------------------------


@pytest.mark.parametrize("codec", codecs.available())
def test_a_compressed_frame_of_a_codec_not_agreed_is_refused_before_it_is_inflated(codec):
    bomb = codecs.compress(codec, memoryview(np.zeros(64 << 20, np.uint8)))  # 64 MiB of zeros, a few KB
    message = [P.packb({"cmd": "step", "arrays": [["|u1", [64 << 20], codec]]}), bomb]
    with pytest.raises(frames.FrameError, match="not agreed"):
        frames.unpack(message, codecs_allowed=())
    with pytest.raises(frames.FrameError, match="not agreed"):
        frames.unpack(message, codecs_allowed=[c for c in codecs.available() if c != codec])
    _, [out] = frames.unpack(message, codecs_allowed=(codec,))
    assert out.nbytes == 64 << 20 and not out.any()


@pytest.mark.parametrize("codec", codecs.available())
def test_arrays_declaring_more_than_the_cap_are_refused_before_any_is_made(codec):
    small = codecs.compress(codec, memoryview(np.zeros(1 << 20, np.uint8)))
    spec = ["|u1", [1 << 30, 2], codec]  # 2 GiB declared over a frame of a few KB
    message = [P.packb({"cmd": "step", "arrays": [spec]}), small]
    with pytest.raises(frames.FrameError, match="declares 2,147,483,648 bytes of arrays, more than the 1,048,576"):
        frames.unpack(message, codecs_allowed=(codec,), max_bytes=1 << 20)
    inline = ["|u1", [4], "inline", b"abcd"]
    with pytest.raises(frames.FrameError, match="more than the 7 allowed"):
        frames.unpack([P.packb({"cmd": "x", "arrays": [inline, inline]})], max_bytes=7)


@pytest.mark.parametrize("codec", codecs.available())
def test_a_frame_that_inflates_past_its_declared_size_is_refused_not_grown(codec):
    data = codecs.compress(codec, memoryview(np.ones(1 << 20, np.uint8)))
    with pytest.raises(frames.FrameError):
        frames.unpack([P.packb({"cmd": "x", "arrays": [["|u1", [4096], codec]]}), data])


def test_the_header_is_read_without_the_arrays():
    message = frames.pack({"cmd": "step", "seq": 2}, [np.zeros(10000, np.uint8)])
    header = frames.unpack_header(message)
    assert header["cmd"] == "step" and header["seq"] == 2 and header["arrays"] == [["|u1", [10000], "none"]]
    assert frames.message_bytes(message) == sum(len(f) for f in message)
    [array] = frames.unpack_arrays(header, message)
    assert array.shape == (10000,) and "arrays" not in header


def test_the_resend_window_counts_its_bytes():
    seq = Sequencer()
    for size in (100, 200, 300):
        header = seq.stamp({"cmd": "result"})
        seq.keep(header["seq"], [b"h" * 10, b"x" * size])
    assert seq.unacked_bytes == 630
    seq.acknowledged(2)
    assert seq.unacked_bytes == 310
    seq.forget()
    assert seq.unacked_bytes == 0 and seq.unacknowledged() == []


def test_infos_that_gymnasium_cannot_tell_apart_are_an_error_not_a_crash():
    from portal_shm.agent.contract.infos import add_info

    infos = add_info({}, {"d": {"_x": {"y": 1}}}, 0, 2)
    infos = add_info(infos, {"d": {"x": 1}}, 1, 2)
    with pytest.raises(ValueError, match="rename info keys that start with '_'"):
        unbatch(infos, 2)
