"""``portal-shm bench --against ale-vector``: ale_py's AtariVectorEnv as a system, set to ALE v5's raw
frames, stepped in lockstep and in async batches through the API the harness drives."""

from __future__ import annotations

import numpy as np
import pytest

from portal_shm.bench import BenchOptions, parse_scenario, parse_scenarios
from portal_shm.bench.ale_vector_system import AleVector, differences, rom_name, unsupported
from portal_shm.bench.measure import batched_run
from portal_shm.bench.systems import SYSTEMS, supports_batches


def test_games_map_to_ale_rom_names_and_other_scenarios_are_refused_with_why():
    assert rom_name(parse_scenario("ALE/Pong-v5")) == "pong"
    assert rom_name(parse_scenario("ALE/SpaceInvaders-v5")) == "space_invaders"
    assert "null env" in unsupported(parse_scenario("null:210x160x3"))
    assert "ALE/<Game>-v5 only" in unsupported(parse_scenario("CartPole-v1"))
    assert "no isolation" in differences(parse_scenario("ALE/Pong-v5"))
    assert SYSTEMS["ale-vector"].module == "ale_py"


@pytest.mark.parametrize("batch_size", [None, 2])
def test_it_steps_raw_v5_frames_in_lockstep_and_in_batches(batch_size):
    pytest.importorskip("ale_py")
    options = BenchOptions(parse_scenarios(["ALE/Pong-v5"]), num_envs=[4], batch_size=batch_size, seed=3)
    envs = AleVector(parse_scenario("ALE/Pong-v5"), 4, options)
    try:
        assert envs.single_observation_space.shape == (1, 210, 160, 3)
        actions = [np.zeros(4, np.int64)] * 3
        if batch_size is None:
            assert not supports_batches(envs)
            obs, _ = envs.reset()
            assert obs.shape == (4, 1, 210, 160, 3)
            obs, reward, terminated, truncated, _ = envs.step(actions[0])
            assert obs.shape == (4, 1, 210, 160, 3) and reward.shape == (4,)
        else:
            assert supports_batches(envs)
            result = batched_run(envs, actions, 0.2, 4, np.zeros(1000, np.int64), True)
            assert result["env_steps"] == 2 * result["batched_steps"] > 0  # batches of 2
    finally:
        envs.close()
