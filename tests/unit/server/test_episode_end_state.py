"""An env no state adapter knows has a state at an episode's end: its generators (``np_random``,
its own and its wrappers'), its wrappers and the pending autoreset. Restored into a fresh env of
the same make, the next reset and the episodes after it are the original's; mid-episode it is
refused, since there the generators are not the env's state."""

import random

import gymnasium as gym
import numpy as np
import pytest

from portal_shm.server import state as S
from portal_shm.wire import protocol as P
from testkit.plain_envs import opaque_walk, plain_walk

MAKES = {"walk": plain_walk, "CartPole-v1": lambda: gym.make("CartPole-v1")}


def _to_episode_end(env, seed, action=1):
    obs, _ = env.reset(seed=seed)
    while True:
        obs, _, terminated, truncated, _ = env.step(action)
        if terminated or truncated:
            return obs


def _same_steps(*envs, steps=60):
    """The envs reset (no seed: their generators decide) and step alike, episode after episode."""
    first, *others = envs
    records = [[env.reset() for env in envs]]
    for t in range(steps):
        records.append([env.step(t % 2) for env in envs])
        if records[-1][0][2] or records[-1][0][3]:
            records.append([env.reset() for env in envs])
    for results in records:
        for other in results[1:]:
            for x, y in zip(results[0], other):
                assert x.keys() == y.keys() if isinstance(x, dict) else np.array_equal(x, y), results


@pytest.mark.parametrize("env_id", MAKES)
def test_an_episode_end_state_makes_a_fresh_env_reset_and_go_on_as_the_original(env_id):
    source, target, never_reset = MAKES[env_id](), MAKES[env_id](), MAKES[env_id]()
    obs = _to_episode_end(source, seed=3)
    target.reset(seed=1234)  # a fresh env with other generators; another one never reset at all
    blob = S.capture(source, env_id, obs, autoreset=True, episode_end=True)
    restored = S.restore(target, blob, env_id)
    assert restored.autoreset and restored.episode_end and np.array_equal(restored.obs, obs)
    S.restore(never_reset, blob, env_id)
    assert target.unwrapped.np_random_seed == never_reset.unwrapped.np_random_seed == 3
    _same_steps(source, target, never_reset)


def test_without_the_generators_the_fresh_env_goes_another_way():
    # (the check above would pass vacuously if the walk drew nothing from its generators)
    source, target = plain_walk(), plain_walk()
    _to_episode_end(source, seed=3)
    target.reset(seed=3)
    with pytest.raises(AssertionError):
        _same_steps(source, target)


def test_every_generator_of_the_env_and_its_wrappers_travels():
    source, target = plain_walk(), plain_walk()
    obs = _to_episode_end(source, seed=8)
    target.reset(seed=9)
    S.restore(target, S.capture(source, "walk", obs, autoreset=True, episode_end=True), "walk")
    assert target.noise.bit_generator.state == source.noise.bit_generator.state  # a wrapper's own numpy one
    assert target.bonus.getstate() == source.bonus.getstate()  # a wrapper's random.Random
    assert target.unwrapped.gusts.getstate() == source.unwrapped.gusts.getstate()  # the base env's own
    assert target.unwrapped.np_random.bit_generator.state == source.unwrapped.np_random.bit_generator.state


@pytest.mark.parametrize("env_id", MAKES)
def test_mid_episode_the_generic_state_is_refused_naming_where_it_exists(env_id):
    env = MAKES[env_id]()
    obs, _ = env.reset(seed=0)
    with pytest.raises(S.StateError, match="no state adapter .* its episode is under way: .* only at an episode.s end"):
        S.capture(env, env_id, obs)
    with pytest.raises(S.StateError, match="its episode is under way"):
        S.capture(env, env_id, obs, autoreset=True)  # (SameStep: the step reset it already)


def test_a_crafted_episode_end_state_is_refused_where_it_would_mislead():
    env = plain_walk()
    obs = _to_episode_end(env, seed=1)
    blob = S.capture(env, "walk", obs, autoreset=True, episode_end=True)
    state = P.unpackb(blob)
    state["autoreset"] = False  # claims a moment mid-episode, where the generators are not the state
    with pytest.raises(S.StateError, match="not at an episode's end"):
        S.restore(plain_walk(), P.packb(state), "walk")
    for key in ("reset", "__class__", "_np_random", "observation_space", "position"):
        state = P.unpackb(blob)
        state["base"]["generators"][key] = state["base"]["generators"]["gusts"]
        with pytest.raises(S.StateError, match="never holds|other than a generator"):
            S.restore(plain_walk(), P.packb(state), "walk")
    state = P.unpackb(blob)
    state["base"]["generators"]["gusts"] = 5
    with pytest.raises(S.StateError, match="other than a generator"):
        S.restore(plain_walk(), P.packb(state), "walk")


def test_a_wrapper_that_cannot_travel_is_named_at_an_episode_end_too():
    env = opaque_walk()
    obs = _to_episode_end(env, seed=1)
    with pytest.raises(S.StateError, match=r"Tally\.counter"):
        S.capture(env, "walk", obs, autoreset=True, episode_end=True)


def test_random_random_round_trips_and_system_random_is_not_plain():
    generator = random.Random(7)
    generator.random()
    copy = S._decode(P.unpackb(P.packb(S._encode(generator, "g"))))
    assert copy.getstate() == generator.getstate() and copy.random() == generator.random()
    with pytest.raises(S._NotPlain):
        S._encode(random.SystemRandom(), "g")


def test_only_adapters_carry_mid_episode():
    assert not S.carries_mid_episode(plain_walk())
    assert not S.carries_mid_episode(gym.make("CartPole-v1"))
    from portal_shm.server.example_envs import RandomWalkEnv

    assert S.carries_mid_episode(gym.wrappers.TimeLimit(RandomWalkEnv(), 10))
