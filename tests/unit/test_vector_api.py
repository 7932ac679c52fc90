"""The VectorPortal behaves as a gymnasium VectorEnv: API, state machine, views, errors."""

import gymnasium as gym
import numpy as np
import pytest

import portal_shm
from portal_shm.agent.contract.kept_views import KeptViewWarning
from testkit.compare import assert_same


@pytest.fixture
def cartpole():
    envs = portal_shm.make_vec("CartPole-v1", 3)
    yield envs
    envs.close()


def test_call_get_attr_set_attr(cartpole):
    cartpole.reset(seed=0)
    assert cartpole.get_attr("gravity") == (9.8, 9.8, 9.8)
    cartpole.set_attr("gravity", [1.0, 2.0, 3.0])
    assert cartpole.get_attr("gravity") == (1.0, 2.0, 3.0)
    cartpole.set_attr("gravity", 5.0)
    assert cartpole.call("np_random_seed") == (0, 1, 2)
    assert cartpole.get_attr("gravity") == (5.0, 5.0, 5.0)
    with pytest.raises(ValueError, match="length equal"):
        cartpole.set_attr("gravity", [1.0])


def test_unsendable_call_result_is_a_clear_error(cartpole):
    with pytest.raises(portal_shm.EnvError, match="cannot be sent to the agent"):
        cartpole.get_attr("np_random")


def test_a_reward_that_is_not_a_number_is_an_env_error_of_its_env():
    envs = portal_shm.make_vec(
        "portal_shm.server.example_envs:FaultyEnv", 4, fault="bad_reward", after=1, vector_kwargs={"envs_per_server": 4}
    )
    try:
        envs.reset(seed=0)
        _, reward, *_ = envs.step(np.zeros(4, np.int64))
        assert reward.tolist() == [1.0] * 4
        with pytest.raises(portal_shm.EnvError, match="lots") as error:
            envs.step(np.zeros(4, np.int64))
        assert error.value.env_index == 0 and error.value.phase == "step"
    finally:
        envs.close()


def test_views_stay_valid_for_ring_depth_minus_one_calls():
    envs = portal_shm.make_vec(
        "portal_shm.server.example_envs:NestedEnv", 2, vector_kwargs={"ring_depth": 3, "copy": False}
    )
    try:
        first, _ = envs.reset(seed=0)
        kept = first["image"].copy()
        for _ in range(2):
            envs.step(envs.action_space.sample())
        assert np.array_equal(first["image"], kept)
        with pytest.warns(KeptViewWarning, match="ring_depth - 1 = 2 further calls"):
            envs.step(envs.action_space.sample())
        assert not np.array_equal(first["image"], kept)  # the slot was reused on the third call
    finally:
        envs.close()


def test_copy_true_returns_fresh_arrays():
    envs = portal_shm.make_vec("CartPole-v1", 2, vector_kwargs={"copy": True, "ring_depth": 2})
    try:
        first, _ = envs.reset(seed=0)
        kept = first.copy()
        for _ in range(3):
            envs.step(np.ones(2, np.int64))
        assert np.array_equal(first, kept)
    finally:
        envs.close()


def test_zero_copy_step_returns_the_same_view_objects():
    envs = portal_shm.make_vec("CartPole-v1", 2, vector_kwargs={"ring_depth": 2, "copy": False})
    try:
        envs.reset(seed=0)
        a = envs.step(np.zeros(2, np.int64))[0]
        envs.step(np.zeros(2, np.int64))
        with pytest.warns(KeptViewWarning):  # ``a`` is still held when its slot is written again
            b = envs.step(np.zeros(2, np.int64))[0]
        assert a is b and not a.flags.owndata
    finally:
        envs.close()


def test_bad_actions_are_rejected_with_the_expected_shape(cartpole):
    cartpole.reset(seed=0)
    with pytest.raises(ValueError, match=r"expected shape \(3,\)"):
        cartpole.step(np.zeros(2, np.int64))
    cartpole.step(np.zeros(3, np.int64))


def test_disabled_mode_refuses_to_step_a_finished_env():
    envs = portal_shm.make_vec("CartPole-v1", 1, max_episode_steps=2, vector_kwargs={"autoreset_mode": "Disabled"})
    try:
        envs.reset(seed=0)
        envs.step(np.zeros(1, np.int64))
        _, _, _, truncated, _ = envs.step(np.zeros(1, np.int64))
        assert truncated[0]
        with pytest.raises(portal_shm.EnvError, match="reset_mask"):
            envs.step(np.zeros(1, np.int64))
        envs.reset(options={"reset_mask": np.array([True])})
        envs.step(np.zeros(1, np.int64))
    finally:
        envs.close()


def test_reset_mask_is_validated(cartpole):
    with pytest.raises(ValueError, match="at least one True"):
        cartpole.reset(options={"reset_mask": np.zeros(3, np.bool_)})
    with pytest.raises(TypeError, match="dtype=np.bool_"):
        cartpole.reset(options={"reset_mask": np.zeros(3, np.int64)})


def test_unknown_backend_names_the_choices():
    with pytest.raises(portal_shm.PortalError, match="available: .*process"):
        portal_shm.make_vec("CartPole-v1", 1, backend="nope")


def test_other_interpreter_and_missing_interpreter(tmp_path):
    import sys

    envs = portal_shm.make_vec("CartPole-v1", 1, python=sys.executable)
    envs.close()
    with pytest.raises(portal_shm.PortalError, match="/no/such/python"):
        portal_shm.make_vec("CartPole-v1", 1, python="/no/such/python")


def test_protocol_mismatch_names_both_versions(tmp_path):
    import sys

    fake = tmp_path / "python-v99"
    fake.write_text(
        "#!/bin/sh\nexec %s -c 'import portal_shm.wire.protocol as p; p.PROTOCOL_VERSION = 99; "
        "from portal_shm.server import main; main()'\n" % sys.executable
    )
    fake.chmod(0o755)
    with pytest.raises(
        portal_shm.errors.ProtocolMismatchError,
        match=r"runs portal-shm-env [\d.]+, protocol 99; this agent runs portal-shm [\d.]+, protocol 1: install portal-shm-env==",
    ):
        portal_shm.make_vec("CartPole-v1", 1, python=str(fake))


def test_legacy_gym_api_env_is_adapted():
    envs = portal_shm.make_vec("portal_shm.server.example_envs:LegacyCounterEnv", 2, limit=3)
    try:
        obs, infos = envs.reset(seed=[1, 2])
        assert infos == {}
        expected = [np.random.RandomState(s).randint(0, 10) for s in (1, 2)]
        assert obs[:, 0].tolist() == expected
        for _ in range(2):
            obs, reward, terminated, truncated, infos = envs.step(np.array([2, 0]))
        obs, reward, terminated, truncated, infos = envs.step(np.array([2, 0]))
        assert reward.tolist() == [2.0, 0.0]
        assert truncated.tolist() == [expected[0] + 6 < 12, True]
        assert terminated.tolist() == [expected[0] + 6 >= 12, False]
        assert infos["TimeLimit.truncated"][1]
    finally:
        envs.close()


def test_make_returns_a_single_gymnasium_env():
    from gymnasium.utils.env_checker import check_env

    env = portal_shm.make("CartPole-v1")
    try:
        assert isinstance(env, gym.Env)
        obs, info = env.reset(seed=3)
        expected_obs, _ = gym.make("CartPole-v1").reset(seed=3)
        assert np.array_equal(obs, expected_obs)
        obs, reward, terminated, truncated, info = env.step(1)
        assert isinstance(reward, float) and isinstance(terminated, bool)
        check_env(env, skip_render_check=True)
    finally:
        env.close()


def test_stable_baselines3_ppo_trains_on_a_portal():
    sb3 = pytest.importorskip("stable_baselines3")
    env = portal_shm.make("CartPole-v1")
    try:
        model = sb3.PPO("MlpPolicy", env, n_steps=64, batch_size=32, n_epochs=1, seed=0, device="cpu")
        model.learn(total_timesteps=128)
        action, _ = model.predict(env.reset(seed=0)[0])
        assert env.action_space.contains(int(action))
    finally:
        env.close()


def test_spaces_that_need_a_ring_past_max_ring_bytes_are_refused_before_it_is_made():
    """A hostile env declares a 4096x4096 frame (its bounds are broadcast views): with
    ``max_ring_bytes`` the portal refuses before the ring (or gymnasium's spaces) are made, and
    leaves no server behind."""

    def children() -> set:
        import os

        found = set()
        for task in os.listdir("/proc/self/task"):
            with open(f"/proc/self/task/{task}/children") as handle:
                found |= {int(pid) for pid in handle.read().split()}
        return found

    before = children()
    with pytest.raises(
        portal_shm.PortalError, match=r"need a ring of 134,\d{3},\d{3} bytes .* max_ring_bytes=1,048,576"
    ):
        portal_shm.make_vec(
            "portal_shm.server.example_envs:HugeSpaceEnv", 2, side=4096, vector_kwargs={"max_ring_bytes": 1 << 20}
        )
    assert children() <= before
    envs = portal_shm.make_vec(
        "portal_shm.server.example_envs:HugeSpaceEnv", 2, side=64, vector_kwargs={"max_ring_bytes": 1 << 20}
    )
    try:
        assert envs.reset(seed=0)[0].shape == (2, 64, 64)
    finally:
        envs.close()


# -- make_vec as gymnasium.make_vec: its documentation, its parameters, what it refuses -----------------


def _children() -> set:
    """This process's child processes (env servers it started and has not reaped)."""
    import os

    found = set()
    for task in os.listdir("/proc/self/task"):
        with open(f"/proc/self/task/{task}/children") as handle:
            found |= {int(pid) for pid in handle.read().split()}
    return found


class Recorder:
    """Stands in for a portal class: what make_vec would have started, with what."""

    def __init__(self, *args, **kwargs):
        self.args, self.kwargs = args, kwargs


def _recorded(monkeypatch):
    from portal_shm import api

    monkeypatch.setattr(api, "VectorPortal", Recorder)
    return api


def test_make_vec_documents_every_parameter_backend_and_option_as_gymnasium_does():
    """Google style, as gymnasium's make_vec: Args (every parameter, every backend by name with each
    option), Returns, Raises, Examples; what the API reference renders (mkdocstrings)."""
    import dataclasses
    import inspect

    from portal_shm.api import make_vec
    from portal_shm.cluster.backend import RayBackend
    from portal_shm.remote.client.backend import RemoteBackend
    from portal_shm.runtimes.registry import BACKENDS

    doc = inspect.getdoc(make_vec)
    sections = ["Args:", "Returns:", "Raises:", "Examples:"]
    assert all(f"\n{section}\n" in doc for section in sections)
    assert [doc.index(s) for s in sections] == sorted(doc.index(s) for s in sections)
    args = doc[doc.index("Args:") : doc.index("Returns:")]
    for name, parameter in inspect.signature(make_vec).parameters.items():
        stars = "**" if parameter.kind is parameter.VAR_KEYWORD else ""
        assert f"\n    {stars}{name}: " in args, name
    built_in = {name: cls for name, cls in BACKENDS.items() if cls.__module__.startswith("portal_shm.")}
    for name, cls in [*built_in.items(), ("remote", RemoteBackend), ("ray", RayBackend)]:
        assert f'- ``"{name}"``' in args, name
        for field in dataclasses.fields(cls):
            assert f"``{field.name}``" in args, (name, field.name)
    for option in ("copy", "autoreset_mode", "batch_size", "envs_per_server", "ring_depth", "step_timeout"):
        assert f"``{option}``" in args


def test_the_docstring_example_runs_as_a_doctest():
    import doctest

    from portal_shm import api

    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    for test in doctest.DocTestFinder().find(api.make_vec, "make_vec", globs={}):
        runner.run(test)
    assert runner.summarize(verbose=False).attempted >= 8
    assert runner.summarize(verbose=False).failed == 0


@pytest.mark.parametrize(
    "call, error, message",
    [
        (
            {"backend": "dokcer"},
            portal_shm.PortalError,
            r"unknown backend 'dokcer'; did you mean 'docker'\?.*remote, ray",
        ),
        ({"backend": "docker", "imag": "portal-shm/ale"}, TypeError, r"imag= .*'docker' backend.*did you mean image="),
        ({"pyton": "/usr/bin/python3"}, TypeError, r"did you mean python= \(an option of the 'process' backend\)"),
        ({"batch_sise": 2}, TypeError, r"did you mean vector_kwargs=\{'batch_size': \.\.\.\}"),
        ({"copy": False}, TypeError, r"did you mean vector_kwargs=\{'copy': \.\.\.\}"),
        ({"vector_kwargs": {"batch_sise": 2}}, TypeError, r"'batch_sise' is not one .*did you mean 'batch_size'\?"),
        ({"vector_kwargs": {"backend": "docker"}}, TypeError, r"'backend' is not one this portal takes"),
        ({"backend": "remote", "vector_kwargs": {"spin_wait": 0}}, TypeError, r"'spin_wait' is not one"),
        ({"backend": "remote", "runtime": "dockr"}, ValueError, r"did you mean 'docker'\?"),
        ({"backend": "remote", "hosts": ["tcp://h:1"], "imge": "x", "runtime": "docker"}, TypeError, r"image="),
        ({"vectorization_mode": "asnyc"}, ValueError, r"Invalid vectorization mode: 'asnyc'; did you mean 'async'\?"),
        ({"vectorization_mode": "vector_entry_point"}, ValueError, r"makes all envs in one process"),
        ({"wrappers": 3}, TypeError, r"wrappers must be a sequence of callables"),
        ({"wrappers": [gym.wrappers.RecordEpisodeStatistics], "backend": "remote"}, portal_shm.PortalError, "hosts"),
    ],
    ids=lambda value: None if isinstance(value, dict) else "",
)
def test_mistakes_are_refused_naming_what_was_meant_before_any_server_starts(call, error, message):
    before = _children()
    with pytest.raises(error, match=message):
        portal_shm.make_vec("CartPole-v1", 2, **call)
    assert _children() <= before


def test_wrappers_are_refused_by_runtimes_that_cannot_load_code():
    with pytest.raises(portal_shm.PortalError, match=r"wrappers \(callables\) cannot be shipped to the 'docker'"):
        portal_shm.make_vec("CartPole-v1", 2, backend="docker", image="portal-shm/ale", wrappers=[lambda env: env])


def test_an_env_argument_close_to_an_option_reaches_the_env_when_the_env_takes_it(monkeypatch):
    """``copy`` and ``imag`` are close to options (the portal's ``copy``, docker's ``image``) and are
    this env's own arguments: never refused, never warned about; ``user`` is docker's option."""
    import warnings

    api = _recorded(monkeypatch)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        portal = api.make_vec(f"{__name__}:TakesNames", 2, backend="docker", image="i", user="1000", copy=2, imag=3)
    spec = portal.args[0][0]
    assert spec.kwargs == {"copy": 2, "imag": 3}
    assert (spec.backend.image, spec.backend.user) == ("i", "1000")
    portal = api.make_vec("CartPole-v1", 2, env_kwargs={"imag": 3})  # env_kwargs: passed as they are
    assert portal.args[0][0].kwargs == {"imag": 3}


def test_an_env_argument_close_to_an_option_of_an_env_the_agent_cannot_see_goes_with_a_warning(monkeypatch):
    api = _recorded(monkeypatch)
    with pytest.warns(
        UserWarning, match=r"imag= goes to the env 'NotRegisteredHere/Game-v5', though it looks like image="
    ):
        portal = api.make_vec("NotRegisteredHere/Game-v5", 2, backend="docker", image="portal-shm/ale", imag=1)
    assert portal.args[0][0].kwargs == {"imag": 1}


class TakesNames(gym.Env):
    """An env whose arguments are close to backend and portal options (imported by its test: known)."""

    def __init__(self, copy=0, imag=0):
        self.observation_space = gym.spaces.Discrete(2)
        self.action_space = gym.spaces.Discrete(2)


@pytest.mark.parametrize("mode", [None, "async", "sync", gym.VectorizeMode.ASYNC, gym.VectorizeMode.SYNC])
def test_vectorization_modes_a_portal_takes_make_the_same_portal(mode, monkeypatch):
    api = _recorded(monkeypatch)
    portal = api.make_vec("CartPole-v1", 3, mode, {"copy": False})
    assert len(portal.args[0]) == 3 and portal.kwargs == {"copy": False}
    assert portal.args[0][0].kwargs == {}  # nothing of the mode reached the env


def test_wrappers_wrap_each_env_in_its_runtime_as_gymnasium_make_vec_does():
    import functools

    wrappers = [
        functools.partial(gym.wrappers.TimeLimit, max_episode_steps=3),
        functools.partial(gym.wrappers.ClipReward, min_reward=0.0, max_reward=0.5),
    ]
    envs = portal_shm.make_vec("CartPole-v1", 2, vectorization_mode="sync", wrappers=wrappers)
    reference = gym.make_vec("CartPole-v1", 2, vectorization_mode="sync", wrappers=wrappers)
    try:
        assert envs.servers[0]["hosting"] == "per-env"
        for got, want in zip(envs.reset(seed=4), reference.reset(seed=4)):
            assert_same(got, want)
        for _ in range(4):
            for got, want in zip(envs.step(np.zeros(2, np.int64)), reference.step(np.zeros(2, np.int64))):
                assert_same(got, want)
        assert envs.get_attr("spec") == reference.get_attr("spec")
        assert envs.get_attr("spec")[0].additional_wrappers[0].name == "ClipReward"
    finally:
        envs.close()
        reference.close()


def test_get_attr_spec_returns_what_sync_vector_env_returns():
    envs = portal_shm.make_vec("CartPole-v1", 2, render_mode="rgb_array", max_episode_steps=7)
    reference = gym.vector.SyncVectorEnv(
        [lambda: gym.make("CartPole-v1", render_mode="rgb_array", max_episode_steps=7)] * 2
    )
    try:
        specs = envs.get_attr("spec")
        assert specs == reference.get_attr("spec")
        assert isinstance(specs[0], gym.envs.registration.EnvSpec) and specs[0].max_episode_steps == 7
        assert envs.get_attr_envs([1], "spec") == reference.get_attr("spec")[1:]
        assert gym.make(specs[0]).spec == specs[0]  # usable as gymnasium's own
    finally:
        envs.close()
        reference.close()


@pytest.mark.parametrize("shared_memory", [True, False])
def test_no_copy_arrays_are_writable_as_async_vector_env_s(shared_memory):
    """gymnasium's own ``test_no_copy_async_vector_env`` (tests/vector of 1.4.0), over a portal."""
    env_fns = [lambda: gym.make("CartPole-v1") for _ in range(4)]
    envs = portal_shm.VectorPortal(env_fns, shared_memory=shared_memory, copy=False)
    try:
        observations, infos = envs.reset()
        observations[0] = 0
        assert (observations[0] == 0).all()
        observations, rewards, *_ = envs.step(np.zeros(4, np.int64))
        observations[1] = 1.0
        rewards += 1
    finally:
        envs.close()


def test_every_portal_class_names_vector_env_among_its_direct_bases():
    """skrl's ``wrap_env`` (its default, ``"auto"``) tells a gymnasium env by the modules of
    ``type(env).__bases__`` (and those of ``env.unwrapped``), not by isinstance."""
    from portal_shm.backends import RayVectorPortal, RemoteVectorPortal

    for cls in (portal_shm.VectorPortal, RemoteVectorPortal, RayVectorPortal):
        assert gym.vector.VectorEnv in cls.__bases__, cls
        assert any(base.__module__.startswith("gymnasium.") for base in cls.__bases__)
