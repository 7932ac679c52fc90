"""Batched entry points (``server/native.py``): called once per env server with its env count, shown
to agents and hosts without that count, and with the options of the per-env entry point they stand for."""

import inspect
import os

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
    for name in ("num_envs", "num_servers"):
        with pytest.raises(TypeError, match=f"env_kwargs name {name}, which a batched entry point"):
            make_batched(envs_of, 3, {name: 1000})
    with pytest.raises(TypeError, match="must return a NativeBatch or a list of 2 envs"):
        make_batched(batched(lambda num_envs: [None]), 2, {})


def test_servers_share_the_cores_among_their_ale_threads():
    """``presets.atari_vector`` with ``num_threads=0``: the cores over the portal's servers on this
    machine (its server says how many), at least one thread each and at most one per env."""
    pytest.importorskip("ale_py.vector_env", reason="ale-py (the atari extra) is not installed")
    from portal_shm.presets import atari_vector
    from portal_shm.server.native import batch_of

    cores = len(os.sched_getaffinity(0))
    for servers, envs, threads in [(1, 8, min(cores, 8)), (cores, 4, 1), (4 * cores, 4, 1), (1, 1, 1)]:
        members = make_batched(atari_vector, envs, {"env_id": "ALE/Pong-v5"}, servers)
        batch = batch_of(members)
        assert batch.num_threads == threads, (servers, envs)
        batch.close()
    batch = batch_of(make_batched(atari_vector, 4, {"env_id": "ALE/Pong-v5", "num_threads": 3}, 2))
    assert batch.num_threads == 3  # (asked for: as it is)
    batch.close()


def test_per_env_wrappers_wrap_each_env_and_cannot_wrap_a_batched_entry_point(tmp_path):
    """``make_vec(wrappers=...)``: the server loads them (cloudpickled) and wraps each env it makes;
    a batched entry point makes all its envs at once, which per-env wrappers cannot wrap."""
    import cloudpickle

    from portal_shm.server.startup import _create_envs

    path = tmp_path / "wrappers.pkl"
    path.write_bytes(cloudpickle.dumps([gym.wrappers.RecordEpisodeStatistics]))
    config = {"env_indices": [0, 1], "env": {"id": "CartPole-v1", "kwargs": {}, "wrappers": str(path)}}
    envs = _create_envs(config, None)
    assert [type(env) for env in envs] == [gym.wrappers.RecordEpisodeStatistics] * 2
    for env in envs:
        env.close()
    config["env"]["id"] = f"{__name__}:plain"
    with pytest.raises(TypeError, match="native vector env .* per-env wrappers cannot wrap it"):
        _create_envs(config, None)
