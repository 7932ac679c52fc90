"""VectorPortal(env_fns): gymnasium's AsyncVectorEnv arguments, factories shipped to real env servers."""

from __future__ import annotations

import functools
import multiprocessing
import threading
import time
import warnings

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.error import NoAsyncCallError
from gymnasium.spaces import Box, Discrete, Graph, GraphInstance, Text, Tuple

import portal_shm
from portal_shm import VectorPortal
from testkit.compare import assert_same


class Counter(gym.Env):
    """Defined in this test module: the env server imports it by name, as the agent does."""

    def __init__(self, start: int = 0, delay: float = 0.0) -> None:
        self.observation_space = Discrete(100)
        self.action_space = Discrete(5)
        self.start, self.delay, self.count = start, delay, start

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.count = self.start
        return self.count, {"start": self.start}

    def step(self, action):
        time.sleep(self.delay)
        if action == 4:
            raise ValueError(f"action {action} is forbidden")
        self.count += int(action)
        return self.count, float(action), self.count >= 10, False, {}


class Note(gym.Space):
    """A custom space without a portable description: values are strings."""

    def sample(self, mask=None, probability=None):
        return "note"

    def contains(self, x):
        return isinstance(x, str)

    def __eq__(self, other):
        return isinstance(other, Note)


class Shapes(gym.Env):
    """Observations and actions of spaces without a fixed layout."""

    def __init__(self, action_space=None):
        self.observation_space = Tuple((Text(5), Graph(Box(-1, 1, (2,)), Discrete(3)), Box(0, 1, (2,))))
        self.action_space = action_space or Text(4)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.observation_space.seed(seed)
        return self.observation_space.sample(), {}

    def step(self, action):
        assert action in self.action_space, action
        obs = self.observation_space.sample()
        return (str(action)[:5], obs[1], obs[2]), 0.0, False, False, {"action": str(action)}


class Noted(gym.Env):
    observation_space = Note()
    action_space = Discrete(2)

    def reset(self, *, seed=None, options=None):
        return "note", {}

    def step(self, action):
        return "note", 0.0, False, False, {}


def make_counter(start: int):
    def make():  # a closure: pickled by value, Counter by reference
        return Counter(start)

    return make


def seeded_rollout(envs, steps: int = 30):
    out = [envs.reset(seed=3)]
    actions = np.random.default_rng(0).integers(0, 2, (steps, envs.num_envs))
    out += [envs.step(a) for a in actions]
    return out


def test_lambdas_equal_sync_vector_env_and_copy_by_default():
    fns = [lambda: gym.make("CartPole-v1") for _ in range(3)]
    envs = VectorPortal(fns)
    sync = gym.vector.SyncVectorEnv(fns)
    try:
        assert envs.copy and envs.single_observation_space == sync.single_observation_space
        assert envs.env_fns == fns
        for ours, theirs in zip(seeded_rollout(envs), seeded_rollout(sync)):
            assert_same(ours, theirs)
        first = envs.step(np.zeros(3, np.int64))[0]
        seen = first.copy()
        for _ in range(2 * envs.ring_depth):
            envs.step(np.zeros(3, np.int64))
        np.testing.assert_array_equal(first, seen)  # copy=True, as AsyncVectorEnv's default: never changed
    finally:
        envs.close()
        sync.close()


def test_closures_partials_and_classes_of_the_test_module():
    envs = VectorPortal([make_counter(1), functools.partial(Counter, 2), Counter], copy=False)
    try:
        obs, infos = envs.reset()
        assert obs.tolist() == [1, 2, 0] and infos["start"].tolist() == [1, 2, 0]
        obs, reward, *_ = envs.step(np.array([1, 2, 3]))
        assert obs.tolist() == [2, 4, 3] and reward.tolist() == [1.0, 2.0, 3.0]
        assert not envs.copy and "make_counter.<locals>.make" in repr(envs)
    finally:
        envs.close()


def test_env_errors_keep_their_type_and_are_logged_as_gymnasium_does():
    envs = VectorPortal([Counter] * 3)
    try:
        envs.reset()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with pytest.raises(ValueError, match="action 4 is forbidden") as info:
                envs.step(np.array([0, 4, 4]))
        assert isinstance(info.value, portal_shm.EnvError) and info.value.env_index == 2  # the last one
        messages = [str(w.message) for w in caught]
        assert len(messages) == 5 and "Worker-1 - Shutting it down" in messages[0]
        assert "ValueError: action 4 is forbidden" in messages[1] and "Raising the last exception" in messages[4]
        with pytest.raises(portal_shm.PortalError, match="cannot continue"):
            envs.reset()  # as AsyncVectorEnv, whose failed workers are shut down
    finally:
        envs.close()


def test_timeouts_are_multiprocessing_timeouts():
    envs = VectorPortal([functools.partial(Counter, delay=0.5)] * 2)
    try:
        envs.reset()
        envs.step_async(np.ones(2, np.int64))
        with pytest.raises(multiprocessing.TimeoutError):
            envs.step_wait(timeout=0.05)
    finally:
        envs.close(terminate=True)


def test_async_reset_and_call_state_machine():
    envs = VectorPortal([Counter] * 2)
    try:
        with pytest.raises(NoAsyncCallError, match="reset_wait"):
            envs.reset_wait()
        envs.reset_async(seed=[1, 2])
        with pytest.raises(gym.error.AlreadyPendingCallError, match="pending call to `reset`"):
            envs.call_async("count")
        obs, _ = envs.reset_wait(timeout=30)
        envs.call_async("count")
        assert envs.call_wait() == (0, 0) and envs.np_random_seed == (1, 2)
        with pytest.raises(ValueError, match="use `reset` directly"):
            envs.call("reset")
        envs.step_async(np.ones(2, np.int64))
        with pytest.warns(UserWarning, match="pending call to `step`"):
            envs.close()
    finally:
        envs.close()


def test_spaces_without_fixed_layout_travel_beside_the_ring():
    envs = VectorPortal([Shapes] * 2, shared_memory=False)
    sync = gym.vector.SyncVectorEnv([Shapes] * 2)
    try:
        assert envs.observation_space == sync.observation_space and envs.action_space == sync.action_space
        obs, _ = envs.reset(seed=5)
        assert_same(obs, sync.reset(seed=5)[0])
        assert isinstance(obs[1][0], GraphInstance) and obs in envs.observation_space
        obs, *_, infos = envs.step(("ab", "cd"))
        assert obs[0] == ("ab", "cd") and infos["action"].tolist() == ["ab", "cd"]
    finally:
        envs.close()
        sync.close()


def test_custom_spaces_come_from_a_local_env_as_in_gymnasium():
    envs = VectorPortal([functools.partial(Shapes, Note())] * 2, shared_memory=False)
    try:
        assert isinstance(envs.single_action_space, Note)
        envs.reset()
        obs, *_ = envs.step(("x", "y"))
        assert obs[0] == ("x", "y")
    finally:
        envs.close()


def test_shared_memory_true_refuses_what_gymnasium_refuses():
    with pytest.raises(TypeError, match="dynamic shape"):
        VectorPortal([Shapes] * 2)
    with pytest.raises(ValueError, match="custom space"):
        VectorPortal([Noted])
    envs = VectorPortal([Noted] * 2, shared_memory=False)
    try:
        assert envs.reset()[0] == ("note", "note") and isinstance(envs.single_observation_space, Note)
    finally:
        envs.close()


def test_observation_mode_tuple_and_render():
    envs = VectorPortal(
        [lambda: gym.make("CartPole-v1", render_mode="rgb_array")] * 2,
        observation_mode=(Box(-5, 5, (2, 4)), Box(-5, 5, (4,))),
    )
    try:
        assert envs.single_observation_space == Box(-5, 5, (4,)) and envs.render_mode == "rgb_array"
        envs.reset(seed=0)
        frames = envs.render()
        assert len(frames) == 2 and frames[0].shape == (400, 600, 3)
    finally:
        envs.close()
    with pytest.raises(RuntimeError, match="common shape and dtype"):
        VectorPortal([lambda: gym.make("CartPole-v1")], observation_mode=(Box(0, 1, (1, 3)), Box(0, 1, (3,))))


def test_options_that_cannot_apply_are_refused_clearly():
    with pytest.raises(ValueError, match="worker"):
        VectorPortal([Counter], worker=lambda *args: None)
    with pytest.raises(ValueError, match="cannot find context"):
        VectorPortal([Counter], context="thread")
    with pytest.raises(ValueError, match="max_concurrency"):
        VectorPortal([Counter], max_concurrency=0)
    with pytest.raises(portal_shm.PortalError, match="'docker' backend"):
        VectorPortal([Counter], backend="docker")
    with pytest.raises(TypeError, match="item 1 is a str"):
        VectorPortal([Counter, "CartPole-v1"])
    lock = threading.Lock()
    with pytest.raises(portal_shm.PortalError, match="cannot be pickled"):
        VectorPortal([lambda: (lock, Counter())[1]])


def test_context_daemon_are_accepted_and_max_concurrency_caps_servers():
    envs = VectorPortal([Counter] * 4, context="spawn", daemon=False, max_concurrency=1)
    try:
        assert len(envs.servers) == 1
        assert envs.reset()[0].tolist() == [0, 0, 0, 0]
    finally:
        envs.close()


def test_factory_errors_at_start_keep_their_type():
    def broken():
        raise KeyError("no such level")

    with pytest.raises(KeyError, match="no such level"):
        VectorPortal([broken])


def test_the_agents_registrations_reach_factories_that_call_gym_make():
    gym.register(id="PortalShmCounter-v0", entry_point=Counter, kwargs={"start": 7})
    try:
        envs = VectorPortal([lambda: gym.make("PortalShmCounter-v0")] * 2)  # as forked workers see it
        try:
            assert envs.reset()[0].tolist() == [7, 7]
        finally:
            envs.close()
    finally:
        del gym.envs.registry["PortalShmCounter-v0"]
