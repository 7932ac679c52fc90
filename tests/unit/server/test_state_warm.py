"""``state.warm``: what a restore reads of the runtime is read ahead (by a spare standing by, or
a zygote before it forks), so that a recycling swap's ``set_state`` does not read it."""

import importlib.metadata

import pytest

from portal_shm.server import state
from portal_shm.server.example_envs import LeakyEnv


def test_a_warmed_env_restores_without_reading_package_metadata(monkeypatch):
    env = LeakyEnv(leak_mb=0.0)
    obs, _ = env.reset(seed=3)
    obs, *_ = env.step(1)
    blob = state.capture(env, "leaky", obs)
    state._installed_version.cache_clear()
    state._versions_of.cache_clear()
    state.warm([env])

    def no_metadata(name):
        raise AssertionError(f"read the metadata of {name} at restore")

    monkeypatch.setattr(importlib.metadata, "version", no_metadata)
    restored_obs = state.restore(LeakyEnv(leak_mb=0.0), blob, "leaky").obs
    assert (restored_obs == obs).all()


def test_without_warming_the_restore_reads_it(monkeypatch):
    # (the check above would pass vacuously if restores never read metadata)
    env = LeakyEnv(leak_mb=0.0)
    obs, _ = env.reset(seed=3)
    blob = state.capture(env, "leaky", obs)
    state._installed_version.cache_clear()
    state._versions_of.cache_clear()
    read = []
    real = importlib.metadata.version
    monkeypatch.setattr(importlib.metadata, "version", lambda name: read.append(name) or real(name))
    state.restore(LeakyEnv(leak_mb=0.0), blob, "leaky")
    assert "numpy" in read


def test_warm_skips_what_it_cannot_describe():
    state.warm([object(), LeakyEnv(leak_mb=0.0)])  # no error: the restore of such an env says why
    with pytest.raises(state.StateError):
        state.restore(object(), b"not a state", "x")
