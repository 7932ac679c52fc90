"""A portal of env factories (``VectorPortal(env_fns)``) starts a server more than once: after a
crash (``on_env_failure="restart"``) and when it recycles. Each start ships that server's factories
again into the run directory; the file is the agent's private one (0600), one per server however
often it starts, and goes with the run directory at close."""

from __future__ import annotations

import functools
import os
import stat
import time

import numpy as np

from portal_shm import VectorPortal
from testkit.restart_envs import TokenFaultEnv

RESTART = {"on_env_failure": "restart", "max_restarts": 10, "step_timeout": 30}


def _factory_files(envs: VectorPortal) -> dict[str, int]:
    """The files of the run directory that hold factories (half-written ones too), with their modes."""
    run_dir = envs._session.resources.run_dir
    return {
        name: stat.S_IMODE(os.lstat(os.path.join(run_dir, name)).st_mode)
        for name in os.listdir(run_dir)
        if "factories" in name
    }


def test_a_crashed_env_fns_server_is_restarted_with_its_factories_shipped_again(tmp_path):
    token = tmp_path / "0"
    env_fns = [functools.partial(TokenFaultEnv, str(tmp_path / str(i)), "step") for i in range(2)]
    envs = VectorPortal(env_fns, envs_per_server=1, **RESTART)
    try:
        run_dir = envs._session.resources.run_dir
        envs.reset(seed=1)
        token.write_text("")  # env 0's process exits in its next step
        for _ in range(4):
            envs.step(np.ones(2, np.int64))
        assert not token.exists()
        assert envs.restarts == [1, 0], envs.restart_log
        assert _factory_files(envs) == {"factories-0.pkl": 0o600, "factories-1.pkl": 0o600}
    finally:
        envs.close()
    assert not os.path.exists(run_dir)


def test_an_env_fns_server_is_recycled_with_its_factories_shipped_again():
    env_fns = [functools.partial(TokenFaultEnv, episode_length=2) for _ in range(2)]
    envs = VectorPortal(env_fns, envs_per_server=1, recycle={"episodes": 1}, **RESTART)
    try:
        run_dir = envs._session.resources.run_dir
        envs.reset(seed=1)
        for _ in range(600):
            envs.step(np.ones(2, np.int64))
            if min(envs.recycles) >= 2:
                break
            time.sleep(0.002)  # spares start meanwhile
        assert min(envs.recycles) >= 2, (envs.recycles, envs.restart_log)
        assert envs.restarts == [0, 0] and not envs.restart_log, envs.restart_log
        assert _factory_files(envs) == {"factories-0.pkl": 0o600, "factories-1.pkl": 0o600}
    finally:
        envs.close()
    assert not os.path.exists(run_dir)


def test_shipping_again_replaces_the_file_and_never_writes_through_a_link(tmp_path):
    from portal_shm.agent.local.env_fns import ship_factories, to_specs

    run_dir, outside = tmp_path / "run", tmp_path / "outside"
    run_dir.mkdir(mode=0o700)
    outside.write_bytes(b"not the agent's")
    specs, _ = to_specs([functools.partial(TokenFaultEnv, episode_length=2)], "process")
    first = ship_factories(specs, str(run_dir), 0)["factories"]
    os.unlink(first)
    os.symlink(outside, first)  # what someone else could have left at the path
    again = ship_factories(specs, str(run_dir), 0)["factories"]
    assert again == first and not os.path.islink(again)
    assert stat.S_IMODE(os.lstat(again).st_mode) == 0o600 and outside.read_bytes() == b"not the agent's"
    assert [name for name in os.listdir(run_dir) if "factories" in name] == ["factories-0.pkl"]
