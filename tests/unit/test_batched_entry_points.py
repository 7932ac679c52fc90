"""Batched entry points (``server/native.py``): called once per env server with its env count, shown
to agents and hosts without that count, and with the options of the per-env entry point they stand for."""

import inspect

import gymnasium as gym
import pytest

from portal_shm.server.native import agent_signature, batched, is_batched, make_batched


def per_env(env_id: str = "CartPole-v1", *, length: int = 10, **kwargs):
    return gym.make(env_id, max_episode_steps=length, **kwargs)


@batched(per_env=per_env)
def envs_of(num_envs: int = 1, env_id: str = "CartPole-v1", *, threads: int = 0, **options):
    return [per_env(env_id, **options) for _ in range(num_envs)]


@batched
def plain(num_envs: int = 1, *, size: int = 2):
    return [gym.make("CartPole-v1") for _ in range(num_envs)]


def test_the_signature_an_agent_sees_has_no_env_count_and_the_per_env_options():
    assert is_batched(envs_of) and is_batched(plain) and not is_batched(per_env)
    assert list(inspect.signature(envs_of).parameters) == ["env_id", "threads", "length", "kwargs"]
    assert list(inspect.signature(plain).parameters) == ["size"]
    assert agent_signature(per_env) == inspect.signature(per_env)


def test_a_server_makes_its_envs_in_one_call_and_an_agent_cannot_set_their_count():
    envs = make_batched(envs_of, 3, {"length": 5})
    assert len(envs) == 3 and all(env.spec.max_episode_steps == 5 for env in envs)
    for env in envs:
        env.close()
    with pytest.raises(TypeError, match="env_kwargs name num_envs, which a batched entry point"):
        make_batched(envs_of, 3, {"num_envs": 1000})
    with pytest.raises(TypeError, match="must return a NativeBatch or a list of 2 envs"):
        make_batched(batched(lambda num_envs: [None]), 2, {})
