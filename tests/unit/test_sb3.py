"""Stable-Baselines3 on portal-shm: the VecEnv contract, SB3's own VecEnvs as reference, the
``SubprocVecEnv`` drop-in's SB3 semantics, PPO learning."""

import multiprocessing

import gymnasium as gym
import numpy as np
import pytest

import portal_shm

pytest.importorskip("stable_baselines3")
torch = pytest.importorskip("torch")

from stable_baselines3 import PPO  # noqa: E402
from stable_baselines3.common.env_util import make_vec_env  # noqa: E402
from stable_baselines3.common.evaluation import evaluate_policy  # noqa: E402
from stable_baselines3.common.monitor import Monitor  # noqa: E402
from stable_baselines3.common.vec_env import DummyVecEnv, VecMonitor, VecNormalize  # noqa: E402
from stable_baselines3.common.vec_env import SubprocVecEnv as SB3SubprocVecEnv  # noqa: E402

from portal_shm.sb3 import SB3VecEnv, SubprocVecEnv, batch_actions, unbatch_infos, wrapper_names  # noqa: E402

pytestmark = pytest.mark.integration  # SB3 through portals: env servers started per test, seconds each

SAME_STEP = {"autoreset_mode": "SameStep"}


@pytest.fixture
def cartpole():
    env = SB3VecEnv(portal_shm.make_vec("CartPole-v1", 4, vector_kwargs=SAME_STEP, max_episode_steps=20))
    yield env
    env.close()


def _actions(step: int) -> np.ndarray:
    """Envs 0 and 1 push one way (their poles fall within ~10 steps: terminated); envs 2 and 3
    alternate (they balance until the 20-step limit: truncated)."""
    return np.array([0, 1, step % 2, (step + 1) % 2])


@pytest.mark.parametrize(
    "backing", ["portal", "portal NextStep", "portal Disabled", "gymnasium SyncVectorEnv", "SubprocVecEnv"]
)
def test_same_results_as_sb3s_own_vec_env(cartpole, backing):
    make = [lambda: gym.make("CartPole-v1", max_episode_steps=20) for _ in range(4)]
    if backing != "portal":
        cartpole.close()
    if backing == "gymnasium SyncVectorEnv":  # any gymnasium vector env works (one without step_async too)
        cartpole = SB3VecEnv(gym.vector.SyncVectorEnv(make, autoreset_mode=gym.vector.AutoresetMode.SAME_STEP))
    elif backing.startswith("portal "):  # the ended envs are reset by SB3VecEnv, in the same step
        mode = {"autoreset_mode": backing.split()[1]}
        cartpole = SB3VecEnv(portal_shm.make_vec("CartPole-v1", 4, vector_kwargs=mode, max_episode_steps=20))
    elif backing == "SubprocVecEnv":
        cartpole = SubprocVecEnv(make)
    reference = DummyVecEnv(make)
    try:
        cartpole.seed(7)
        reference.seed(7)
        obs, expected = cartpole.reset(), reference.reset()
        np.testing.assert_array_equal(obs, expected)
        assert cartpole.reset_infos == reference.reset_infos
        ends = {"terminated": 0, "truncated": 0}
        for step in range(45):
            obs, rewards, dones, infos = cartpole.step(_actions(step))
            e_obs, e_rewards, e_dones, e_infos = reference.step(_actions(step))
            np.testing.assert_array_equal(obs, e_obs)
            np.testing.assert_array_equal(rewards, e_rewards)
            np.testing.assert_array_equal(dones, e_dones)
            assert rewards.dtype == cartpole.reward_dtype and dones.dtype == e_dones.dtype
            assert len(infos) == 4
            for info, e_info in zip(infos, e_infos):
                assert info.keys() == e_info.keys()
                assert info["TimeLimit.truncated"] == e_info["TimeLimit.truncated"]
                if "terminal_observation" in e_info:
                    np.testing.assert_array_equal(info["terminal_observation"], e_info["terminal_observation"])
                    ends["truncated" if e_info["TimeLimit.truncated"] else "terminated"] += 1
            assert cartpole.reset_infos == reference.reset_infos
        assert ends["terminated"] >= 4 and ends["truncated"] >= 2  # both kinds of episode end were compared
    finally:
        reference.close()
        cartpole.close()


def test_terminal_observation_is_a_copy_the_ring_cannot_overwrite(cartpole):
    cartpole.seed(0)
    cartpole.reset()
    kept = None
    for step in range(60):
        _, _, dones, infos = cartpole.step(_actions(step))
        if kept is None and dones[0]:
            kept = infos[0]["terminal_observation"]
            value = kept.copy()
    assert kept is not None and kept.flags.owndata and kept.flags.writeable
    np.testing.assert_array_equal(kept, value)


def test_observations_are_fresh_by_default_and_ring_views_only_when_asked(cartpole):
    cartpole.seed(0)
    first = cartpole.reset()  # a default portal's: the caller's, never changed by later steps
    seen = first.copy()
    for _ in range(8):
        cartpole.step(np.zeros(4, np.int64))
    np.testing.assert_array_equal(first, seen)
    viewing = SB3VecEnv(portal_shm.make_vec("CartPole-v1", 2, vector_kwargs={**SAME_STEP, "copy": False}))
    try:
        obs = viewing.reset()
        assert not obs.flags.owndata and obs.flags.writeable  # a view of the ring (writable, as AsyncVectorEnv's)
    finally:
        viewing.close()
    copying = SB3VecEnv(portal_shm.make_vec("CartPole-v1", 2, vector_kwargs={**SAME_STEP, "copy": False}), copy=True)
    try:
        assert copying.reset().flags.owndata
    finally:
        copying.close()


def test_vec_env_contract(cartpole):
    assert cartpole.num_envs == 4
    assert cartpole.observation_space == gym.make("CartPole-v1").observation_space
    assert cartpole.action_space == gym.spaces.Discrete(2)
    assert cartpole.render_mode is None
    obs = cartpole.reset()
    assert obs.shape == (4, 4) and all(cartpole.observation_space.contains(o) for o in obs)
    cartpole.action_space.seed(0)
    for _ in range(30):
        obs, rewards, dones, infos = cartpole.step(np.array([cartpole.action_space.sample() for _ in range(4)]))
        assert obs.shape == (4, 4) and rewards.shape == (4,) and dones.shape == (4,)
        assert rewards.dtype == np.float32 and dones.dtype == np.bool_
        assert isinstance(infos, list) and all(isinstance(info, dict) for info in infos)


def test_get_attr_set_attr_env_method(cartpole):
    assert cartpole.get_attr("gravity") == [9.8] * 4
    assert cartpole.get_attr("gravity", indices=[1, 3]) == [9.8, 9.8]
    cartpole.set_attr("gravity", 3.0, indices=[1, 2])
    assert cartpole.get_attr("gravity") == [9.8, 3.0, 3.0, 9.8]
    cartpole.set_attr("gravity", 5.0)
    assert cartpole.get_attr("gravity", indices=0) == [5.0]
    cartpole.seed(11)
    cartpole.reset()
    assert cartpole.env_method("get_wrapper_attr", "np_random_seed") == [11, 12, 13, 14]
    assert cartpole.env_method("get_wrapper_attr", "np_random_seed", indices=[2]) == [13]
    assert cartpole.has_attr("gravity") and not cartpole.has_attr("no_such_attribute")
    with pytest.raises(AttributeError, match="no_such_attribute"):
        cartpole.get_attr("no_such_attribute")


def test_env_is_wrapped_reads_the_remote_wrapper_chain(cartpole):
    assert cartpole.env_is_wrapped(gym.wrappers.TimeLimit) == [True] * 4
    assert cartpole.env_is_wrapped(Monitor, indices=[0]) == [False]
    assert wrapper_names("<Monitor<CartPoleEnv instance>>") == ["Monitor"]
    assert wrapper_names("<TimeLimit<OrderEnforcing<CartPoleEnv<CartPole-v1>>>>") == ["TimeLimit", "OrderEnforcing"]


def test_seed_and_options_reach_the_next_reset_only(cartpole):
    cartpole.seed(3)
    first = cartpole.reset().copy()
    second = cartpole.reset().copy()
    cartpole.seed(3)
    np.testing.assert_array_equal(cartpole.reset(), first)
    assert not np.array_equal(first, second)
    cartpole.set_options({"low": -0.01, "high": 0.01})
    assert np.abs(cartpole.reset()).max() <= 0.01
    cartpole.seed(5)  # options that differ per env: the envs are reset in groups, each env once
    cartpole.set_options([{"low": -0.001, "high": 0.001}, {}, {"low": 0.04, "high": 0.05}, {}])
    obs = cartpole.reset()
    assert np.abs(obs[0]).max() <= 0.001 and obs[2].min() >= 0.04
    assert np.abs(obs[[1, 3]]).max() > 0.001
    reference = DummyVecEnv([lambda: gym.make("CartPole-v1") for _ in range(4)])
    reference.seed(5)
    reference.set_options([{"low": -0.001, "high": 0.001}, {}, {"low": 0.04, "high": 0.05}, {}])
    np.testing.assert_array_equal(obs, reference.reset())


def test_render_tiles_every_envs_frame():
    env = SB3VecEnv(portal_shm.make_vec("CartPole-v1", 2, vector_kwargs=SAME_STEP, render_mode="rgb_array"))
    try:
        env.reset()
        frames = env.get_images()
        assert len(frames) == 2 and frames[0].shape == (400, 600, 3)
        np.testing.assert_array_equal(env.render(), np.concatenate(frames))  # SB3 tiles 2 frames as 2 rows
    finally:
        env.close()


def test_unbatch_infos_follows_the_masks():
    infos = {
        "a": np.array([1.5, 0.0]),
        "_a": np.array([True, False]),
        "episode": {"r": np.array([0.0, 3.0]), "_r": np.array([False, True])},
        "_episode": np.array([False, True]),
    }
    assert unbatch_infos(infos, 2) == [{"a": 1.5}, {"episode": {"r": 3.0}}]


@pytest.mark.training
@pytest.mark.parametrize("vec_env", ["SB3VecEnv(make_vec(...))", "SubprocVecEnv(env_fns)"])
def test_ppo_learns_cartpole_through_the_portal(vec_env):
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    if vec_env.startswith("SB3VecEnv"):
        env = VecMonitor(SB3VecEnv(portal_shm.make_vec("CartPole-v1", 8, vector_kwargs=SAME_STEP)))
    else:  # the drop-in, as a script written for SB3's SubprocVecEnv makes it
        env = VecMonitor(SubprocVecEnv([lambda: gym.make("CartPole-v1") for _ in range(8)]))
    try:
        model = PPO(
            "MlpPolicy",
            env,
            n_steps=64,
            batch_size=256,
            n_epochs=10,
            learning_rate=1e-3,
            gamma=0.98,
            gae_lambda=0.8,
            ent_coef=0.0,
            seed=0,
            device="cpu",
        )
        model.learn(total_timesteps=20_000)
        env.seed(100)
        mean_return, _ = evaluate_policy(model, env, n_eval_episodes=16, deterministic=True)
    finally:
        env.close()
        torch.set_num_threads(threads)
    # A random policy averages ~22 on CartPole-v1; this seeded run reaches 408 through either class.
    assert mean_return > 150


# -- SubprocVecEnv: SB3's semantics ------------------------------------------------------------
class Probe(gym.Env):
    """Records what reaches it: the actions it steps with, the calls of ``bump``; env ``rank`` 1
    alone has ``extra``, and ``fail`` raises in the ranks it is told to."""

    def __init__(self, rank: int, action_space: gym.Space = gym.spaces.Discrete(2)):
        self.rank = rank
        self.action_space = action_space
        self.observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.bumps = 0
        self.last_action = None
        if rank == 1:
            self.extra = "only env 1"

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return self.np_random.uniform(-1, 1, 2).astype(np.float32), {}

    def step(self, action):
        self.last_action = action
        return np.zeros(2, np.float32), 0.0, False, False, {}

    def bump(self, by: int = 1) -> int:
        self.bumps += by
        return self.bumps

    def fail(self, ranks: list) -> int:
        if self.rank in ranks:
            raise ValueError(f"env {self.rank} was told to fail")
        return self.rank


class Marker(gym.Wrapper):
    """A wrapper class importable by name (the env side imports it from this module)."""


def _probes(n: int = 3, **kwargs) -> list:
    return [lambda rank=rank: Probe(rank, **kwargs) for rank in range(n)]


@pytest.fixture(scope="module")
def probes():
    env = SubprocVecEnv(_probes())
    yield env
    env.close()


def test_env_method_runs_only_in_the_chosen_envs(probes):
    before = probes.get_attr("bumps")
    assert probes.env_method("bump", indices=[0, 2]) == [before[0] + 1, before[2] + 1]
    assert probes.env_method("bump", 10, indices=-1) == [before[2] + 11]  # negative: from the end, as SB3
    assert probes.env_method("bump", by=2, indices=[1, 1]) == [before[1] + 2, before[1] + 4]  # named twice: twice
    assert probes.get_attr("bumps") == [before[0] + 1, before[1] + 4, before[2] + 11]
    assert probes.get_attr("bumps", indices=np.int64(1)) == [before[1] + 4]
    assert probes.get_attr("bumps", indices=[]) == []
    # A method or attribute only the chosen env has: the others are never asked (SB3's test).
    assert probes.get_attr("extra", indices=[1]) == ["only env 1"]
    assert not probes.has_attr("extra") and probes.has_attr("bumps")
    with pytest.raises(AttributeError, match="extra"):
        probes.get_attr("extra")
    assert probes.env_method("bump", 0) == probes.get_attr("bumps")  # the portal still serves every env
    with pytest.raises(IndexError, match="out of range"):
        probes.get_attr("bumps", indices=[3])
    with pytest.raises(TypeError, match="observation_space"):  # not data: it cannot travel as msgpack
        probes.get_attr("observation_space", indices=[0])
    assert probes.get_attr("rank") == [0, 1, 2]


def test_set_attr_sets_the_outermost_wrapper_of_the_chosen_envs_only():
    env = SubprocVecEnv([lambda: Marker(Probe(0)), lambda: Marker(Probe(1))])
    try:
        env.set_attr("rank", 7, indices=[1])
        assert env.get_attr("rank") == [0, 7]  # the outermost wrapper's attribute is found first
        assert env.env_method("fail", [7]) == [0, 1]  # the env itself still has its own rank, as with SB3's setattr
        env.set_attr("new", "x")
        assert env.get_attr("new") == ["x", "x"]
    finally:
        env.close()


def test_an_error_in_one_envs_call_leaves_the_others_usable(probes):
    with pytest.raises(ValueError, match="env 1 was told to fail") as raised:
        probes.env_method("fail", [1])
    assert isinstance(raised.value, portal_shm.EnvError)
    assert probes.env_method("fail", [1], indices=[0, 2]) == [0, 2]
    assert probes.env_method("fail", []) == [0, 1, 2]  # env 1 too
    probes.reset()
    _, _, dones, _ = probes.step([0, 1, 0])
    assert dones.tolist() == [False] * 3


SPACES = {
    "Discrete": gym.spaces.Discrete(3),
    "Box": gym.spaces.Box(-1.0, 1.0, (2,), np.float32),
    "MultiBinary": gym.spaces.MultiBinary(3),
    "Dict": gym.spaces.Dict({"move": gym.spaces.Discrete(4), "aim": gym.spaces.Box(0.0, 1.0, (2,), np.float32)}),
    "Tuple": gym.spaces.Tuple((gym.spaces.Discrete(5), gym.spaces.MultiDiscrete([2, 3]))),
}


@pytest.mark.parametrize("name", list(SPACES))
def test_per_env_action_lists_for_every_action_space(name):
    """SB3 passes ``[space.sample() for _ in range(n)]``: env ``i`` gets item ``i``."""
    space = SPACES[name]
    env = SubprocVecEnv(_probes(action_space=space), envs_per_server=3)  # (one server: starts faster)
    try:
        env.reset()
        env.action_space.seed(0)
        actions = [env.action_space.sample() for _ in range(3)]
        env.step(actions)
        received = env.get_attr("last_action")  # (through msgpack: tuples come back as lists)
        for sent, got in zip(actions, received):
            if isinstance(space, gym.spaces.Dict):
                assert got.keys() == sent.keys() and all(np.array_equal(got[k], sent[k]) for k in sent)
            elif isinstance(space, gym.spaces.Tuple):
                assert all(np.array_equal(g, s) for g, s in zip(got, sent))
            else:
                np.testing.assert_array_equal(got, sent)
    finally:
        env.close()


def test_batch_actions():
    box = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    batch = np.zeros((3, 2), np.float32)
    assert batch_actions(box, batch, 3) is batch  # already a batch
    np.testing.assert_array_equal(batch_actions(box, [[0.5, 0.5]] * 3, 3), np.full((3, 2), 0.5, np.float32))
    dict_space = SPACES["Dict"]
    batched = batch_actions(dict_space, [{"move": i, "aim": np.full(2, i / 4, np.float32)} for i in range(3)], 3)
    np.testing.assert_array_equal(batched["move"], [0, 1, 2])
    assert batched["aim"].shape == (3, 2)
    tuple_batch = batch_actions(SPACES["Tuple"], [(4, np.array([1, 2])), (0, np.array([0, 0]))], 2)
    np.testing.assert_array_equal(tuple_batch[0], [4, 0])
    np.testing.assert_array_equal(tuple_batch[1], [[1, 2], [0, 0]])
    with pytest.raises(ValueError, match="one action per env"):
        batch_actions(box, [[0.0, 0.0]] * 2, 3)


def test_env_is_wrapped_checks_isinstance_in_the_envs_process():
    class Local(Marker):
        """Defined here, so cloudpickle ships it by value; it must still be the same class there."""

    env = SubprocVecEnv(
        [lambda: Probe(0), lambda: Monitor(Probe(1)), lambda: Local(Monitor(Probe(2))), lambda: Marker(Probe(3))]
    )
    try:
        assert env.env_is_wrapped(Monitor) == [False, True, True, False]
        assert env.env_is_wrapped(Marker) == [False, False, True, True]  # Local is a Marker: isinstance, not names
        assert env.env_is_wrapped(Local, indices=[2, 3]) == [True, False]
        assert env.env_is_wrapped(gym.Wrapper, indices=0) == [False]  # the env itself is not a wrapper (SB3's rule)
        wrapped = VecNormalize(env)  # through SB3's VecEnvWrapper
        assert wrapped.env_is_wrapped(Monitor, indices=[1]) == [True]
    finally:
        env.close()


def test_seed_as_sb3s_applied_at_the_next_reset_only(probes):
    assert probes.seed(3) == [3, 4, 5]
    first = probes.reset().copy()
    assert not np.array_equal(probes.reset(), first)  # seeds are used once
    probes.seed(3)
    np.testing.assert_array_equal(probes.reset(), first)
    drawn = probes.seed()  # no seed: a random one, then one per env counting up
    assert len(drawn) == 3 and drawn[1] == drawn[0] + 1 and drawn[2] == drawn[0] + 2
    reference = DummyVecEnv(_probes())
    reference.seed(3)
    np.testing.assert_array_equal(reference.reset(), first)


def test_start_method_is_checked_as_sb3_checks_it():
    with pytest.raises(ValueError, match="cannot find context for 'illegal_method'") as ours:
        SubprocVecEnv(_probes(), start_method="illegal_method")
    with pytest.raises(ValueError) as theirs:
        SB3SubprocVecEnv(_probes(), start_method="illegal_method")
    assert str(ours.value) == str(theirs.value)
    method = multiprocessing.get_all_start_methods()[0]
    env = SubprocVecEnv(_probes(1), start_method=method)  # accepted; servers are fresh processes anyway
    env.close()
    with pytest.raises(ValueError, match="SAME_STEP"):
        SubprocVecEnv(_probes(1), autoreset_mode="NextStep")


def test_render_and_get_images_as_sb3s():
    env = SubprocVecEnv([lambda: gym.make("CartPole-v1", render_mode="rgb_array")] * 2)
    try:
        env.reset()
        frames = env.get_images()
        assert len(frames) == 2 and frames[0].shape == (400, 600, 3)
        np.testing.assert_array_equal(env.render(), np.concatenate(frames))
    finally:
        env.close()
    env = SubprocVecEnv([lambda: gym.make("CartPole-v1")])
    try:
        with pytest.warns(UserWarning, match="rgb_array"):
            assert env.get_images() == [None]
    finally:
        env.close()


def test_make_vec_env_with_the_drop_in_as_vec_env_cls():
    env = make_vec_env("CartPole-v1", n_envs=2, seed=0, vec_env_cls=SubprocVecEnv)
    reference = make_vec_env("CartPole-v1", n_envs=2, seed=0, vec_env_cls=SB3SubprocVecEnv)
    try:
        assert env.env_is_wrapped(Monitor) == [True, True]
        np.testing.assert_array_equal(env.reset(), reference.reset())
        actions = [env.action_space.sample() for _ in range(2)]
        for got, expected in zip(env.step(actions), reference.step(actions)):
            if isinstance(expected, np.ndarray):
                np.testing.assert_array_equal(got, expected)
                assert got.dtype == expected.dtype
        env.close()
        env.close()  # twice, as SB3 allows
        assert env.closed
    finally:
        env.close()
        reference.close()
