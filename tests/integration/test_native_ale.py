"""Env servers hosting a native vector env (``presets.atari_vector``: ALE's ``AtariVectorEnv``):
a portal gives exactly what ``AtariVectorEnv`` gives in-process with the same settings and seeds
(observations, rewards, flags, infos; episode ends in both autoreset modes; partial resets), falls
back to per-env presets where the runtime or the options do not allow it and says why, and refuses
what a native batch cannot do (per-env state, stepping an ended env in DISABLED) with a clear error."""

import os
import signal

import numpy as np
import pytest
from gymnasium.vector import AutoresetMode

import portal_shm
import portal_shm.envpool as envpool
from portal_shm.errors import EnvError
from testkit.native_ale import breakout_in_process, breakout_options

pytest.importorskip("ale_py.vector_env")

OPTIONS = breakout_options(60)


def _portal(n, mode=AutoresetMode.NEXT_STEP, per_server=2, **options):
    return portal_shm.make_vec(
        "portal_shm.presets:atari_vector",
        n,
        env_kwargs={**OPTIONS, **options},
        vector_kwargs={"envs_per_server": per_server, "autoreset_mode": mode},
    )


def _reference(n, mode=AutoresetMode.NEXT_STEP):
    return breakout_in_process(n, mode, 60)


@pytest.mark.parametrize("mode", [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP])
def test_a_portal_of_native_servers_equals_atari_vector_env_in_process(mode):
    n, seeds = 4, [11, 12, 13, 14]
    envs, reference = _portal(n, mode), _reference(n, mode)
    try:
        assert [s["hosting"] for s in envs.servers] == ["ale_py.AtariVectorEnv"] * 2
        obs, info = envs.reset(seed=seeds)
        ref_obs, ref_info = reference.reset(seed=np.array(seeds))
        np.testing.assert_array_equal(obs, ref_obs)
        np.testing.assert_array_equal(info["lives"], ref_info["lives"])
        rng = np.random.default_rng(0)
        ends = 0
        for _ in range(150):  # episodes of at most 60 steps: several ends (and autoresets) per env
            actions = rng.integers(0, 4, n)
            got, want = envs.step(actions), reference.step(actions)
            for a, b in zip(got[:4], want[:4]):
                np.testing.assert_array_equal(a, b)
            for key in ("lives", "frame_number", "episode_frame_number"):
                np.testing.assert_array_equal(got[4][key], want[4][key])
            ended = got[2] | got[3]
            ends += int(ended.sum())
            if mode == AutoresetMode.SAME_STEP and ended.any():
                for i in np.flatnonzero(ended):
                    np.testing.assert_array_equal(got[4]["final_obs"][i], want[4]["final_obs"][i])
        assert ends >= 8
        report = envs.stats()
        assert sum(e["episodes"] for e in report["envs"]) >= ends - n  # counted by the servers too
        assert [s["hosting"] for s in report["servers"]] == ["ale_py.AtariVectorEnv"] * 2
    finally:
        envs.close()
        reference.close()


def test_a_partial_reset_resets_only_the_masked_envs_of_a_native_server():
    n = 4
    envs, reference = _portal(n), _reference(n)
    try:
        envs.reset(seed=[1, 2, 3, 4])
        reference.reset(seed=np.array([1, 2, 3, 4]))
        rng = np.random.default_rng(1)
        for _ in range(5):
            actions = rng.integers(0, 4, n)
            envs.step(actions), reference.step(actions)
        mask = np.array([False, True, True, False])
        obs, _ = envs.reset(seed=[0, 7, 8, 0], options={"reset_mask": mask})
        ref_obs, _ = reference.reset(seed=np.array([7, 8]), options={"reset_mask": mask})
        np.testing.assert_array_equal(obs, ref_obs)
        for _ in range(20):
            actions = rng.integers(0, 4, n)
            np.testing.assert_array_equal(envs.step(actions)[0], reference.step(actions)[0])
    finally:
        envs.close()
        reference.close()


def test_options_it_cannot_express_fall_back_to_per_env_presets_and_say_why():
    envs = _portal(2, episodic_life=True)  # envpool's lost life continues the game; ALE's restarts it
    try:
        (server,) = envs.servers
        assert server["hosting"].startswith("per-env (episodic_life continues the game")
        obs, _ = envs.reset(seed=[1, 2])
        assert obs.shape == (2, 4, 84, 84)
        envs.step(np.zeros(2, np.int64))
    finally:
        envs.close()


def test_what_a_native_batch_cannot_do_is_refused_with_what_to_use():
    envs = _portal(2, mode=AutoresetMode.DISABLED, max_episode_steps=3)
    try:
        envs.reset(seed=[1, 2])
        with pytest.raises(EnvError, match="per-env entry point"):
            envs.get_state([0])
        for _ in range(3):
            *_, truncated, _ = envs.step(np.zeros(2, np.int64))
        assert truncated.all()
        with pytest.raises(EnvError, match="autoreset_mode is DISABLED"):
            envs.step(np.zeros(2, np.int64))
    finally:
        envs.close()


def test_the_envpool_drop_in_runs_a_native_server_per_batch_with_envpools_infos():
    envs = envpool.make("Pong-v5", num_envs=4, batch_size=2, seed=3, max_episode_steps=40, reward_clip=True)
    try:
        assert [len(s["envs"]) for s in envs.portal.servers] == [2, 2]
        assert {s["hosting"] for s in envs.portal.servers} == {"ale_py.AtariVectorEnv"}
        envs.async_reset()
        rng = np.random.default_rng(2)
        truncations = 0
        for _ in range(200):
            obs, reward, terminated, truncated, info = envs.recv()
            assert obs.shape == (2, 4, 84, 84) and obs.dtype == np.uint8
            assert info["elapsed_step"].dtype == np.int32 and info["reward"].dtype == np.float32
            np.testing.assert_array_equal(reward, np.sign(info["reward"]))
            assert (info["elapsed_step"] <= 40).all()
            truncations += int(truncated.sum())
            assert (info["elapsed_step"][truncated] == 40).all()
            envs.send(rng.integers(0, 6, 2), info["env_id"])
        assert truncations >= 4
        envs.recv()
    finally:
        envs.close()


def test_a_native_server_that_dies_is_restarted_and_its_envs_go_on():
    envs = portal_shm.make_vec(
        "portal_shm.presets:atari_vector",
        4,
        env_kwargs=OPTIONS,
        vector_kwargs={"envs_per_server": 2, "on_env_failure": "restart"},
    )
    try:
        envs.reset(seed=[1, 2, 3, 4])
        for _ in range(3):
            envs.step(np.zeros(4, np.int64))
        os.kill(envs.servers[1]["pid"], signal.SIGKILL)
        obs, _, _, truncated, info = envs.step(np.zeros(4, np.int64))
        np.testing.assert_array_equal(info["_env_restarted"], [False, False, True, True])
        assert truncated[2:].all() and not truncated[:2].any()  # their episodes ended: no state to go on from
        assert envs.servers[1]["hosting"] == "ale_py.AtariVectorEnv"
        for _ in range(3):
            obs, *_ = envs.step(np.ones(4, np.int64))
        assert obs.shape == (4, 4, 84, 84)
    finally:
        envs.close()


def test_the_envpool_drop_in_hosts_games_in_ale_on_a_remote_host_and_falls_back_on_an_older_one(tmp_path):
    """A host of this version serves ``presets.atari_vector`` (its default entry points); one that
    refuses it, as a host older than it does, leaves the drop-in to per-env presets with a warning."""
    from testkit.hosts import HostProcess, Keys

    keys = Keys(str(tmp_path / "keys"))
    current = HostProcess(keys)
    older = HostProcess(keys, "--entry-points", "portal_shm.presets:atari,portal_shm.presets:vizdoom")
    try:
        options = {"backend": "remote", **keys.options()}
        envs = envpool.make("Pong-v5", env_type="gymnasium", num_envs=2, seed=1, hosts=[current.address], **options)
        try:
            assert [s["hosting"] for s in envs.portal.servers] == ["ale_py.AtariVectorEnv"]
            envs.reset()
            assert envs.step(np.zeros(2, np.int64))[0].shape == (2, 4, 84, 84)
        finally:
            envs.close()
        with pytest.warns(UserWarning, match="has no presets.atari_vector .*the games run per env"):
            envs = envpool.make("Pong-v5", env_type="gymnasium", num_envs=2, seed=1, hosts=[older.address], **options)
        try:
            envs.reset()
            assert envs.step(np.zeros(2, np.int64))[0].shape == (2, 4, 84, 84)
        finally:
            envs.close()
    finally:
        current.stop()
        older.stop()
    assert current.process.returncode == 0 and older.process.returncode == 0
