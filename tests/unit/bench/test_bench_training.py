"""``portal-shm bench training:ALE/<Game>-v5``: Atari as people train it (envpool's defaults) as a
scenario: portals host the games in ALE's vector env (a server per batch), in-process systems make
the same preset per env, and ALE's vector env and envpool run with the same settings."""

from __future__ import annotations

import numpy as np
import pytest

from portal_shm.bench import BenchOptions, parse_scenario, parse_scenarios
from portal_shm.bench.ale_vector_system import ALE_TRAINING, AleVector, differences
from portal_shm.bench.scenarios import ScenarioError
from portal_shm.bench.systems import SYSTEMS


def test_a_training_scenario_names_the_game_its_entry_points_and_envpools_task():
    sc = parse_scenario("training:ALE/SpaceInvaders-v5")
    assert sc.is_training and sc.is_game and not sc.is_null
    assert sc.target == "portal_shm.presets:atari_vector" and sc.env_target == "portal_shm.presets:atari"
    assert sc.kwargs["env_id"] == "ALE/SpaceInvaders-v5" and sc.kwargs["stack"] == 4
    assert sc.envpool_task() == "SpaceInvaders-v5"
    assert sc.docker_image() == "portal-shm/ale"
    assert "envpool's Atari defaults" in differences(sc)
    with pytest.raises(ScenarioError, match="training:ALE/<Game>-v5"):
        parse_scenario("training:CartPole-v1")


def test_in_process_systems_make_the_preset_per_env_and_portals_host_ale_vector():
    pytest.importorskip("ale_py.vector_env")
    sc = parse_scenario("training:ALE/Pong-v5")
    env = sc.env_fn()()
    try:
        obs, info = env.reset(seed=1)
        assert obs.shape == (4, 84, 84) and set(info) == {"lives", "reward", "terminated", "elapsed_step"}
    finally:
        env.close()
    options = BenchOptions(parse_scenarios([sc.name]), num_envs=[4], seed=2)
    envs = SYSTEMS["portal-process"].build(sc, 4, options)
    try:
        assert [(len(s["envs"]), s["hosting"]) for s in envs.servers] == [(4, "ale_py.AtariVectorEnv")]
        obs, _ = envs.reset(seed=2)
        assert obs.shape == (4, 4, 84, 84)
    finally:
        envs.close()


def test_ale_vector_runs_the_training_settings_for_a_training_scenario():
    pytest.importorskip("ale_py.vector_env")
    sc = parse_scenario("training:ALE/Pong-v5")
    envs = AleVector(sc, 2, BenchOptions(parse_scenarios([sc.name]), num_envs=[2], seed=0))
    try:
        assert envs.single_observation_space.shape == (ALE_TRAINING["stack_num"], 84, 84)
        obs, _ = envs.reset()
        assert obs.shape == (2, 4, 84, 84)
        envs.step(np.zeros(2, np.int64))
    finally:
        envs.close()
