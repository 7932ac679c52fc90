"""The chaos soak (benchmarks/chaos.py), short: every fault kind injected into real portals while
each env's every transition is checked against its in-process replay; nothing lost, nothing left.

The process and remote lanes run everywhere; the docker lane needs Docker and the portal-shm/ale
image, and is skipped without them (failed with ``PORTAL_SHM_REQUIRE_DOCKER=1``, as in CI).
"""

import importlib.util
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def load_chaos():
    spec = importlib.util.spec_from_file_location("chaos", BENCHMARKS / "chaos.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["chaos"] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def short(chaos, backends: tuple):
    """About 20 s of faults, one every ~2 s (each kind at least once), on small limits: Pong
    episodes of 60 steps and a recycle after every episode."""
    settings = chaos.Settings(
        minutes=0.33,
        backends=backends,
        fault_interval=2.0,
        step_timeout=2.0,
        sample_interval=1.0,
        drain_s=30.0,
        pong_episode_steps=60,
        recycle={"episodes": 1},
    )
    return chaos.run(settings)


def check(result: dict, kinds: tuple, recycles: int) -> None:
    assert result["steps_lost"] == 0, result["lanes"]
    for lane in result["lanes"]:
        assert lane["error"] is None and lane["steps"] > 50, lane
        assert lane["counter_mismatches"] == [] and lane["unresolved_faults"] == [], lane
    for kind in kinds:
        faults = result["faults"][kind]
        assert faults["injected"] >= 1 and faults["recovered"] == faults["injected"], (kind, faults)
        assert faults["recovery_s"]["max"] < 30, (kind, faults)
    assert sum(lane["recycles"] for lane in result["lanes"]) >= recycles
    assert not any(result["left_behind"].values()), result["left_behind"]
    # (flat RSS and descriptors are the long soak's to judge: 20 s of samples, a restart under way in
    # some, cannot tell a leak from a server being replaced)


@pytest.mark.slow  # a short soak of every fault at once
def test_chaos_on_processes_and_a_remote_host_behind_a_link_loses_no_step():
    chaos = load_chaos()
    result = short(chaos, ("process", "remote"))
    check(result, ("sigkill", "sigstop", "host_restart", "link_cut"), recycles=2)
    assert "steps lost 0" in chaos.render(result)


def test_a_restart_count_the_infos_disagree_with_is_reported_with_its_phase_and_cause():
    """A lane whose portal counted restarts its infos never showed names them: envs, phase, cause."""
    load_chaos()
    from chaos_lane import Lane  # (beside chaos.py, importable once it is loaded)

    class Portal:
        restarts, recycles = [1, 1, 0, 0], [0, 0, 0, 0]
        restart_log = [
            {"envs": [2], "phase": "step", "cause": "x", "counted": True, "attempts": 1, "shown": "step"},
            {"envs": [0, 1], "phase": "call", "cause": "ServerDiedError: env server 0 (envs [0, 1]) died",
             "counted": True, "attempts": 1, "shown": None},
        ]  # fmt: skip

    lane = Lane.__new__(Lane)
    lane.envs, lane.restarts, lane.recycles = Portal(), [0, 0, 1, 0], [0, 0, 0, 0]
    problems = lane.counter_mismatches()
    assert problems[0] == "restarts: portal [1, 1, 0, 0], infos [0, 0, 1, 0]"
    never = "envs [0, 1]: restart in call (counted, never shown in the infos, 1 fresh server(s)): ServerDiedError"
    assert never in problems[2], problems
    assert "envs [2]: restart in step (counted, shown in step" in problems[1]


@pytest.mark.docker
def test_chaos_on_containers_loses_no_step():
    from testkit.docker_images import docker_or_skip, ensure_image

    ensure_image(docker_or_skip(), "ale", "portal-shm/ale")
    result = short(load_chaos(), ("docker",))
    assert result["skipped"] == {}
    check(result, ("sigkill", "sigstop"), recycles=0)  # a container spare rarely gets ready in 20 s of faults
