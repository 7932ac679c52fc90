"""Env states on real envs: saved mid-trajectory, restored on another server or in a container,
replayed under the recorded actions; forked into 8 envs; refused across runtimes and kwargs.

One env of a portal is stepped along a recorded trajectory and saved at random points (each state
taken before the step it precedes); each state is restored into an env of another server
(``envs_per_server=1``) or another runtime and replayed under the same 200 actions: observations,
rewards, both flags (with ``TimeLimit``'s truncation and the autoreset after it) must be those of
the original, and ``set_state`` must return the observation of the saved step. The Docker tests
run images built from this checkout (``portal-shm-test/<name>-state``), since a state's code is
the env side's.
"""

from __future__ import annotations

import hashlib

import gymnasium as gym
import numpy as np
import pytest

import portal_shm

pytestmark = pytest.mark.integration

REPLAY = 200  # steps replayed from each saved point
PONG_POINTS = 100  # random save points of a trajectory, in-process servers
DOCKER_POINTS = 100
MUJOCO_POINTS = 100
LIMIT = 150  # TimeLimit (and the preset's own limit): several truncations inside each trajectory
PONG = {"repeat_action_probability": 0.25, "max_episode_steps": LIMIT}
PRESET = ("portal_shm.presets:atari", {"repeat_action_probability": 0.25, "max_episode_steps": LIMIT})


def digest(obs: np.ndarray) -> str:
    return hashlib.sha1(np.ascontiguousarray(obs).tobytes()).hexdigest()


def record(envs, points: int, seed: int, ends: int = 3) -> tuple:
    """Env 0 stepped along random actions, its state saved at ``points`` random steps (and right
    after a truncation, whose next step autoresets). Returns (actions, outputs, saved): outputs[u]
    is env 0's (obs digest, reward, terminated, truncated) of step u; saved maps a step t to the
    (state, observation) before it. ``ends``: the flag the trajectory must raise (3: truncated, 2:
    terminated)."""
    rng = np.random.default_rng(seed)
    length = 2 * LIMIT + 10
    chosen = set(rng.choice(length, points - 1, replace=False).tolist()) | {LIMIT}
    envs.action_space.seed(seed)
    actions = [envs.action_space.sample() for _ in range(length + REPLAY)]
    obs, _ = envs.reset(seed=seed)
    outputs, saved = [], {}
    for t, action in enumerate(actions):
        if t in chosen:
            saved[t] = (envs.get_state([0])[0], np.array(obs[0]))
        obs, reward, terminated, truncated, _ = envs.step(action)
        outputs.append((digest(obs[0]), float(reward[0]), bool(terminated[0]), bool(truncated[0])))
    assert any(out[ends] for out in outputs), "no episode end inside the trajectory: LIMIT is too long"
    return actions, outputs, saved


def replay(envs, target: int, actions, outputs, saved) -> None:
    """Each saved state restored into env ``target`` of ``envs`` and stepped along the recording."""
    others = [i for i in range(envs.num_envs) if i != target]
    for t, (state, obs) in sorted(saved.items()):
        restored, _ = envs.set_state([state], [target])
        assert np.array_equal(restored[target], obs), f"set_state's observation differs from step {t}'s"
        for u in range(t, t + REPLAY):
            batch = np.stack([actions[u][0]] * envs.num_envs)
            for i in others:  # the other envs step on as they like
                batch[i] = envs.single_action_space.sample()
            obs, reward, terminated, truncated, _ = envs.step(batch)
            got = (digest(obs[target]), float(reward[target]), bool(terminated[target]), bool(truncated[target]))
            assert got == outputs[u], f"the state saved before step {t}, replayed: step {u} differs"


@pytest.mark.slow  # a minute a case: every state of a long Pong replayed
@pytest.mark.parametrize("env_id, kwargs", [("ALE/Pong-v5", PONG), PRESET], ids=["pong", "atari-preset"])
def test_sticky_pong_states_replay_on_another_server(env_id, kwargs):
    envs = portal_shm.make_vec(env_id, 2, vector_kwargs={"envs_per_server": 1}, **kwargs)
    try:
        assert len(envs.servers) == 2
        actions, outputs, saved = record(envs, PONG_POINTS, seed=11)
        replay(envs, 1, actions, outputs, saved)  # env 0's states into env 1, on the other server
    finally:
        envs.close()


def test_one_pong_state_forked_into_8_envs_gives_8_equal_streams():
    source = portal_shm.make_vec("ALE/Pong-v5", 1, **PONG)
    forks = portal_shm.make_vec("ALE/Pong-v5", 8, **PONG)
    try:
        source.reset(seed=4)
        source.action_space.seed(4)
        for _ in range(40):
            obs, *_ = source.step(source.action_space.sample())
        state, saved_obs = source.get_state([0])[0], obs[0].copy()
        forks.reset(seed=99)
        obs, _ = forks.set_state([state] * 8, range(8))
        assert all(np.array_equal(obs[i], saved_obs) for i in range(8))
        rng = np.random.default_rng(5)
        for _ in range(REPLAY):
            action = int(rng.integers(0, 6))
            want, want_reward, want_term, want_trunc, _ = source.step(np.array([action]))
            obs, reward, terminated, truncated, _ = forks.step(np.full(8, action))
            assert all(np.array_equal(obs[i], want[0]) for i in range(8))
            assert (reward == want_reward[0]).all() and (terminated == want_term[0]).all()
            assert (truncated == want_trunc[0]).all()
    finally:
        source.close()
        forks.close()


def _state_image(name: str) -> str:
    from portal_shm.runtimes.image_build import build_image

    base = "portal-shm/base:bullseye" if name == "legacy" else None
    return build_image(name, f"portal-shm-test/{name}-state", base=base)


@pytest.fixture(scope="module")
def state_images(docker_client):
    """Images with this checkout's env side (a cached build: seconds once the packages are in)."""
    return {name: _state_image(name) for name in ("ale", "mujoco", "legacy")}


@pytest.mark.parametrize("env_id, kwargs", [("ALE/Pong-v5", PONG), PRESET], ids=["pong", "atari-preset"])
def test_pong_states_from_a_process_replay_in_a_container(state_images, env_id, kwargs):
    source = portal_shm.make_vec(env_id, 1, **kwargs)
    target = portal_shm.make_vec(env_id, 1, backend="docker", image=state_images["ale"], **kwargs)
    try:
        actions, outputs, saved = record(source, DOCKER_POINTS, seed=12)
        target.reset(seed=0)
        target.action_space.seed(0)
        replay(target, 0, actions, outputs, saved)
    finally:
        source.close()
        target.close()


@pytest.mark.parametrize("env_id, ends", [("HalfCheetah-v5", 3), ("Hopper-v5", 2)])
def test_mujoco_states_replay_in_other_containers(state_images, env_id, ends):
    image = state_images["mujoco"]
    kwargs = {"max_episode_steps": LIMIT}
    envs = portal_shm.make_vec(env_id, 2, backend="docker", image=image, vector_kwargs={"envs_per_server": 1}, **kwargs)
    try:
        assert len(envs.servers) == 2
        actions, outputs, saved = record(envs, MUJOCO_POINTS, seed=13, ends=ends)
        replay(envs, 1, actions, outputs, saved)  # env 0's states into env 1, another container
    finally:
        envs.close()


def test_a_legacy_runtime_state_is_refused_by_a_current_runtime_naming_both(state_images):
    legacy = portal_shm.make_vec(
        "CartPole-v1", 2, backend="docker", image=state_images["legacy"], vector_kwargs={"envs_per_server": 1}
    )
    current = portal_shm.make_vec("CartPole-v1", 1)
    try:
        legacy.reset(seed=2)
        for _ in range(5):
            obs, *_ = legacy.step(np.array([1, 0]))
        state = legacy.get_state([0], allow_pickle=True)[0]  # gym 0.26's CartPole: pickled in its runtime
        restored, _ = legacy.set_state([state], [1], allow_pickle=True)  # same runtime: fine
        assert np.array_equal(restored[1], obs[0])
        current.reset(seed=2)
        with pytest.raises(portal_shm.EnvError, match=r"gym 0\.26\.2 there, absent here") as error:
            current.set_state([state], [0], allow_pickle=True)
        message = str(error.value)
        assert "python 3.9" in message and f"gymnasium {gym.__version__}" in message
        assert "same versions" in message
    finally:
        legacy.close()
        current.close()


def test_a_pre_026_gym_env_replays_across_legacy_containers(state_images):
    envs = portal_shm.make_vec(
        "psm_legacy_walk:make", 2, backend="docker", image=state_images["legacy"], vector_kwargs={"envs_per_server": 1}
    )
    try:
        envs.reset(seed=3)
        for _ in range(4):
            envs.step(np.array([2, 0]))
        state = envs.get_state([0], allow_pickle=True)[0]
        with pytest.raises(portal_shm.EnvError, match="allow_pickle=True"):
            envs.set_state([state], [1])  # unpickling is opt-in on restore too
        envs.set_state([state], [1], allow_pickle=True)
        for action in [0, 1, 2, 2, 1, 0, 1, 1]:
            obs, reward, terminated, truncated, _ = envs.step(np.array([action, action]))
            assert np.array_equal(obs[0], obs[1]) and reward[0] == reward[1]
            assert terminated[0] == terminated[1] and truncated[0] == truncated[1]
    finally:
        envs.close()


# -- the env side's own checks, in this process -------------------------------------------------
class OpaqueCounter(gym.Wrapper):
    """Keeps its count in an object a state cannot carry."""

    def __init__(self, env):
        super().__init__(env)
        self.counter = iter(range(10**6))


def test_a_wrapper_with_state_that_cannot_travel_fails_get_state_naming_it():
    from portal_shm.server.state import StateError, capture

    env = OpaqueCounter(gym.make("CartPole-v1"))
    env.reset(seed=0)
    with pytest.raises(StateError, match=r"wrapper .*OpaqueCounter .*OpaqueCounter\.counter .*get_state\(\)"):
        capture(env, "CartPole-v1", None, allow_pickle=True)


def same(a, b) -> bool:
    if isinstance(b, np.ndarray):
        return isinstance(a, np.ndarray) and a.dtype == b.dtype and np.array_equal(a, b)
    if hasattr(b, "maxlen") or isinstance(b, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(b, dict):
        return type(a) is type(b) and a.keys() == b.keys() and all(same(a[k], b[k]) for k in b)
    if isinstance(b, np.random.Generator):
        return repr(a.bit_generator.state) == repr(b.bit_generator.state)
    return type(a) is type(b) and a == b


def test_common_wrappers_and_the_presets_travel_whole():
    """TimeLimit, OrderEnforcing, PassiveEnvChecker, RecordEpisodeStatistics and frame stacks:
    after a restore into a fresh env every attribute but the configuration equals the source's."""
    from portal_shm.presets import atari
    from portal_shm.server.state import _chain, _is_configuration, capture, restore

    def make():
        env = gym.make("ALE/Pong-v5", repeat_action_probability=0.25, max_episode_steps=LIMIT)
        return gym.wrappers.FrameStackObservation(gym.wrappers.RecordEpisodeStatistics(env), 3)

    pytest.importorskip("ale_py")
    for build in (make, lambda: atari(max_episode_steps=LIMIT)):
        source, target = build(), build()
        obs, _ = source.reset(seed=1)
        for _ in range(LIMIT + 7):  # past a truncation: the episode counters have counted one
            obs, _, terminated, truncated, _ = source.step(2)
            if terminated or truncated:
                obs, _ = source.reset()
        target.reset(seed=5)
        restore(target, capture(source, "x", obs), "x")
        for mine, theirs in zip(_chain(target)[:-1], _chain(source)[:-1]):
            for key, value in vars(theirs).items():
                if key != "env" and not _is_configuration(value):
                    assert same(vars(mine)[key], value), f"{type(theirs).__name__}.{key}"


def test_a_state_is_refused_by_an_env_made_with_other_kwargs():
    from portal_shm.server.state import StateError, capture, restore

    pytest.importorskip("ale_py")
    sticky = gym.make("ALE/Pong-v5", **PONG)
    plain = gym.make("ALE/Pong-v5", repeat_action_probability=0.0, max_episode_steps=LIMIT)
    obs, _ = sticky.reset(seed=0)
    plain.reset(seed=0)
    with pytest.raises(StateError, match="repeat_action_probability=0.25 there, 0.0 here"):
        restore(plain, capture(sticky, "ALE/Pong-v5", obs), "ALE/Pong-v5")


def test_a_crafted_state_cannot_set_what_a_state_never_holds():
    """A state is input from outside: it may only set back the plain attributes a wrapper has."""
    import gymnasium as gym

    from portal_shm.server import state as S
    from portal_shm.server.example_envs import RandomWalkEnv
    from portal_shm.wire import protocol as P

    env = gym.wrappers.TimeLimit(RandomWalkEnv(), 10)
    obs, _ = env.reset(seed=0)
    blob = S.capture(env, "walk", obs)
    for key in ("env", "__class__", "_max_episode_steps_missing", "spec"):
        state = P.unpackb(blob)
        state["wrappers"][0][2][key] = 1
        with pytest.raises(S.StateError, match="never holds"):
            S.restore(env, P.packb(state), "walk")
    assert isinstance(env.env, RandomWalkEnv)


@pytest.mark.parametrize(
    "env_id", ["ALE/Pong-v5", "ALE/Breakout-v5", "ALE/SpaceInvaders-v5", "ALE/MsPacman-v5", "ALE/Seaquest-v5"]
)
def test_a_state_at_an_episode_end_skips_the_last_action_and_any_last_action_resets_alike(env_id):
    """A state taken where the next step resets (an ended episode, autoreset pending) carries no
    last action: the search for it (up to ~1,000 emulated frames) is skipped, since ALE's reset
    overwrites it. Each such state, restored into an env whose own last action is each of several,
    resets and steps exactly as the original env does."""
    import ale_py

    from portal_shm.server.state import _set_last_action, capture, restore
    from portal_shm.wire import protocol as P

    gym.register_envs(ale_py)
    original, target = (gym.make(env_id, repeat_action_probability=0.25, max_episode_steps=40) for _ in range(2))
    rng = np.random.default_rng(3)
    original.reset(seed=1)
    target.reset(seed=2)
    legal = list(target.unwrapped.ale.getLegalActionSet())

    def go_on(env) -> list:
        out = [digest(env.reset()[0])]
        for action in actions:
            obs, reward, terminated, *_ = env.step(action)
            out.append((digest(obs), float(reward), bool(terminated)))
        return out

    for _ in range(12):
        obs, done = None, False
        while not done:
            obs, _, terminated, truncated, _ = original.step(original.action_space.sample())
            done = terminated or truncated
        state = capture(original, env_id, obs, autoreset=True)
        assert P.unpackb(state)["base"]["last_action"] is None
        emulator = original.unwrapped.ale.cloneState(include_rng=True)
        actions = rng.integers(0, original.action_space.n, size=60)
        runs = []
        for last in legal[::3]:
            _set_last_action(target.unwrapped.ale, emulator, last)  # the target's own last action
            restore(target, state, env_id)
            runs.append(go_on(target))
        want = go_on(original)
        assert all(run == want for run in runs), "a state at an episode end resets otherwise"
