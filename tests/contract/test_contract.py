"""The contract every portal kind keeps (``portal_shm.agent.contract.base.PortalVectorEnv``), one test body
run over every kind (``conftest.py``): a kind that drifts shows up as a failing parameter.

Results are compared with gymnasium's SyncVectorEnv (lockstep) and with each env's own gymnasium
env (async batches); errors are checked with their fields, as a local portal raises them.
"""

import multiprocessing
import os
import re
import signal
import threading
import time

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.error import AlreadyPendingCallError, ClosedEnvironmentError, NoAsyncCallError

import portal_shm
from portal_shm.runtimes.resources import run_base_dir
from testkit.compare import assert_same, follow_each_env, kept, rollout
from testkit.native_ale import ATARI_VECTOR, breakout_in_process, breakout_options

pytestmark = pytest.mark.integration

FAULTY = "portal_shm.server.example_envs:FaultyEnv"
CARTPOLE = {"max_episode_steps": 10}  # short episodes: every rollout crosses several autoresets


def sync(n: int, mode: str = "NextStep") -> gym.vector.SyncVectorEnv:
    return gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1", **CARTPOLE)] * n, autoreset_mode=mode)


def server_pids(make, envs) -> list:
    """Each env server's process on this machine (remote and Ray hosts run here, on loopback: a
    host tells its agents no pids, so they are its processes' children, from /proc)."""
    if make.hosted:
        return [child for host in make.host_pids(envs) for child in children(host)]
    return [
        server["pid"] or int(re.search(r"process pid (\d+)", server["runtime"]).group(1)) for server in envs.servers
    ]


def children(pid: int) -> list:
    found = []
    for task in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{task}/children") as handle:
            found += [int(c) for c in handle.read().split()]
    return found


def pid_gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:  # a zombie counts as gone
            return handle.read().split(")")[-1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def wait_gone(pids: list, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while not all(pid_gone(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    return all(pid_gone(p) for p in pids)


def test_is_a_portal_vector_env_and_a_gymnasium_vector_env(make):
    envs = make("CartPole-v1", 3, **CARTPOLE)
    assert isinstance(envs, portal_shm.PortalVectorEnv)
    assert isinstance(envs, gym.vector.VectorEnv)
    assert gym.vector.VectorEnv in type(envs).__bases__  # (where skrl's wrap_env looks for it)
    assert envs.num_envs == 3
    assert envs.observation_space.shape == (3, 4)
    assert envs.action_space == gym.spaces.MultiDiscrete([2, 2, 2])
    assert envs.metadata["autoreset_mode"] == gym.vector.AutoresetMode.NEXT_STEP


@pytest.mark.parametrize("mode", ["NextStep", "SameStep", "Disabled"])
def test_lockstep_results_equal_sync_vector_env(make, mode):
    expected = sync(3, mode)
    envs = make("CartPole-v1", 3, vector_kwargs={"autoreset_mode": mode}, hosts=2, **CARTPOLE)
    try:
        assert envs.single_observation_space == expected.single_observation_space
        assert envs.single_action_space == expected.single_action_space
        assert envs.observation_space == expected.observation_space
        assert envs.action_space == expected.action_space
        assert envs.metadata == expected.metadata
        assert_same(rollout(envs, 40, seed=11, mode=mode), rollout(expected, 40, seed=11, mode=mode))
    finally:
        expected.close()


@pytest.mark.parametrize("mode", ["NextStep", "SameStep"])
def test_arrays_a_client_keeps_never_change_under_it(make, mode):
    """A replay buffer holding references, TorchRL's tensors over numpy, a list of batches: what a
    default portal returns stays as it was, long after its ring slot (or reply array) was reused."""
    expected = sync(3, mode)
    envs = make("CartPole-v1", 3, vector_kwargs={"autoreset_mode": mode}, hosts=2, **CARTPOLE)
    try:
        assert_same(rollout(envs, 30, seed=4, mode=mode, keep=kept), rollout(expected, 30, seed=4, mode=mode))
    finally:
        expected.close()


def test_async_batches_a_client_keeps_never_change_under_it(make):
    envs = make("CartPole-v1", 4, vector_kwargs={"batch_size": 2}, hosts=2, **CARTPOLE)
    obs, infos = envs.reset(seed=1)
    envs.action_space.seed(1)
    held, copies = [(obs,)], [(obs.copy(),)]
    for _ in range(30):
        envs.send(envs.action_space.sample(), infos["env_id"])
        obs, reward, terminated, truncated, infos = envs.recv()
        held.append((obs, reward, terminated, truncated))
        copies.append(tuple(a.copy() for a in held[-1]))
    assert_same(held, copies)


def _scribble(batch) -> None:
    """Write into every array of a batch, as a client normalising in place would: each must be writable."""
    for array in (a for a in batch if isinstance(a, np.ndarray)):
        assert array.flags.writeable
        array[0] = 128 if array.dtype != np.bool_ else True


def test_views_take_writes_as_async_vector_envs_arrays_do_and_change_no_later_result(make):
    """``copy=False`` hands out writable arrays, as AsyncVectorEnv's shared memory (gymnasium's own
    ``test_no_copy_async_vector_env`` writes ``observations[0] = 0``): a write changes that batch
    alone, never a later one (one host: its replies' arrays handed out as they are)."""
    views = make("CartPole-v1", 4, vector_kwargs={"copy": False, "ring_depth": 2}, **CARTPOLE)
    expected = sync(4)
    try:
        batch, want = views.reset(seed=5), expected.reset(seed=5)
        for step in range(12):
            assert_same(tuple(batch), tuple(want))
            _scribble(batch)
            actions = np.array([step % 2, 0, 1, step % 2])
            batch, want = views.step(actions), expected.step(actions)
    finally:
        expected.close()


def test_views_of_async_batches_take_writes_and_change_no_later_batch(make):
    n, seed = 4, 5
    envs = make("CartPole-v1", n, vector_kwargs={"batch_size": 2, "copy": False, "ring_depth": 2}, **CARTPOLE)
    expected = [gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1", **CARTPOLE)]) for _ in range(n)]
    try:
        assert follow_each_env(envs, expected, seed, 20, after=lambda result: _scribble(result[:4])) == set(range(n))
    finally:
        for env in expected:
            env.close()


def test_get_attr_spec_gives_gymnasiums_env_spec_as_sync_vector_env_does(make):
    envs = make("CartPole-v1", 2, **CARTPOLE)
    expected = sync(2)
    try:
        specs = envs.get_attr("spec")
        assert specs == expected.get_attr("spec") and isinstance(specs[0], gym.envs.registration.EnvSpec)
    finally:
        expected.close()


def test_async_pairs_give_what_the_blocking_calls_give(make):
    expected = sync(3)
    envs = make("CartPole-v1", 3, hosts=2, **CARTPOLE)
    try:
        envs.reset_async(seed=5)
        assert_same(envs.reset_wait(timeout=60), expected.reset(seed=5))
        rng = np.random.default_rng(0)
        for step in range(25):
            actions = rng.integers(0, 2, 3)
            envs.step_async(actions)
            assert_same(envs.step_wait(timeout=60), expected.step(actions), f"step {step}")
        envs.call_async("np_random_seed")
        assert envs.call_wait(timeout=60) == (5, 6, 7)
        assert envs.call("np_random_seed") == expected.call("np_random_seed")
    finally:
        expected.close()


def test_calls_out_of_order_raise_gymnasiums_errors(make):
    envs = make("CartPole-v1", 2, hosts=2)
    for wait in (envs.step_wait, envs.reset_wait, envs.call_wait):
        with pytest.raises(NoAsyncCallError):
            wait()
    envs.reset(seed=0)
    envs.step_async(np.zeros(2, np.int64))
    with pytest.raises(AlreadyPendingCallError):
        envs.step_async(np.zeros(2, np.int64))
    with pytest.raises(AlreadyPendingCallError):
        envs.reset()
    with pytest.raises(AlreadyPendingCallError):
        envs.call_async("np_random_seed")
    with pytest.raises(NoAsyncCallError):
        envs.reset_wait()
    obs, reward, terminated, truncated, _ = envs.step_wait()
    assert obs.shape == (2, 4) and reward.dtype == np.float64 and terminated.dtype == truncated.dtype == np.bool_
    envs.step(np.ones(2, np.int64))  # the pending step is over: the portal goes on


def test_a_closed_portal_raises_and_closes_again_quietly(make):
    envs = make("CartPole-v1", 2, hosts=2)
    envs.reset(seed=0)
    envs.close()
    with pytest.raises(ClosedEnvironmentError):
        envs.step(np.zeros(2, np.int64))
    with pytest.raises(ClosedEnvironmentError):
        envs.reset()
    with pytest.raises(ClosedEnvironmentError):
        envs.call("np_random_seed")
    envs.close()


RUNTIME_TEXT = {
    "process": "process pid ",
    "venv": "venv ",
    "docker": "docker container ",
    "remote": " on host tcp://127.0.0.1:",
    "ray": " on host tcp://127.0.0.1:",
}


def test_servers_say_where_each_env_lives(make):
    envs = make("CartPole-v1", 4, hosts=2)
    servers = envs.servers
    assert servers, "a portal has servers"
    for index, server in enumerate(servers):
        assert {"server", "envs", "runtime", "pid"} <= set(server), server
        assert server["server"] == index
        assert RUNTIME_TEXT[make.kind] in server["runtime"], server  # the kind under test, not another
        assert server["pid"] is None or isinstance(server["pid"], int)
    envs_of_all = [i for server in servers for i in server["envs"]]
    assert sorted(envs_of_all) == list(range(4)), servers
    if make.hosted:
        assert len({server["host"] for server in servers}) == 2, servers


def test_local_servers_name_their_process(make):
    if make.hosted:
        pytest.skip("pid is the host's to know: remote and Ray servers report None")
    envs = make("CartPole-v1", 2)
    for server in envs.servers:
        assert isinstance(server["pid"], int) and not pid_gone(server["pid"]), server


def test_env_kwargs_of_a_megabyte_reach_every_server_and_leave_no_config_file(make):
    """A server's config travels as a private file, not in an environment variable (Linux refuses
    one over 128 KiB): 1 MB of env kwargs starts and serves; the servers removed their files."""
    if make.hosted:
        pytest.skip("an env host takes env kwargs of at most 64 KiB from an agent (its hello's cap)")
    payload = "0123456789abcdef" * (1 << 16)  # (1 MiB)
    envs = make("portal_shm.server.example_envs:PayloadEnv", 4, payload=payload, episode_length=3)
    assert envs.get_attr("payload_length") == (len(payload),) * 4
    assert envs.get_attr("payload")[3] == payload  # (the kwarg itself arrived whole)
    envs.reset(seed=0)
    assert envs.step(np.zeros(4, np.int64))[1].tolist() == [1.0] * 4
    run_dir = os.path.join(run_base_dir(), envs.tag)
    assert [name for name in os.listdir(run_dir) if name.startswith("config-")] == []
    envs.close()
    assert not os.path.exists(run_dir)


def test_async_batches_follow_each_envs_own_gymnasium_env(make):
    """Batches of 2 of 4 envs (over two hosts for the remote kinds, so batches come from both)."""
    n, seed = 4, 9
    envs = make("CartPole-v1", n, vector_kwargs={"batch_size": 2}, hosts=2, **CARTPOLE)
    expected = [gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1", **CARTPOLE)]) for _ in range(n)]
    try:
        assert envs.action_space == gym.vector.utils.batch_space(envs.single_action_space, 2)
        assert envs.observation_space == gym.vector.utils.batch_space(envs.single_observation_space, 2)
        assert follow_each_env(envs, expected, seed, 60) == set(range(n))
    finally:
        for env in expected:
            env.close()


@pytest.mark.parametrize("phase", ["step", "reset"])
def test_an_env_error_names_the_env_its_phase_and_carries_its_traceback(make, phase):
    envs = make(FAULTY, 4, hosts=2, fault="raise", phase=phase, after=100)
    [server] = [server for server in envs.servers if 3 in server["envs"]]
    envs.reset(seed=0)
    envs.set_attr("after", [100, 100, 100, 2])  # only env 3 fails (the second host's, when there are two)
    with pytest.raises(ValueError) as info:
        for _ in range(5):
            envs.step(np.zeros(4, np.int64))
            if phase == "reset":
                envs.reset(seed=1)
    error = info.value
    assert isinstance(error, portal_shm.EnvError), type(error).__mro__
    assert error.env_index == 3 and error.phase == phase and error.error_type == "ValueError"
    assert error.remote_message == f"FaultyEnv failed in {phase} on purpose"
    assert "Traceback" in error.remote_traceback and "_maybe_fail" in error.remote_traceback
    assert f"FaultyEnv failed in {phase} on purpose" in error.remote_traceback
    assert error.runtime and f"env 3 raised ValueError in {phase}" in str(error)
    assert server.get("host", server["runtime"]) in str(error)  # the env's runtime, or its host


RESTARTING = {"on_env_failure": "restart", "max_restarts": 1, "envs_per_server": 1}


def dying(make):
    """Two envs, one per server (and per host), whose server exits at each of its first steps."""
    return make(FAULTY, 2, vector_kwargs=RESTARTING, hosts=2, fault="exit", phase="step", after=0)


def test_a_restarted_env_ends_its_episode_and_names_its_failure(make):
    envs = dying(make)
    envs.reset(seed=0)
    _, reward, terminated, truncated, infos = envs.step(np.zeros(2, np.int64))
    assert truncated.all() and not terminated.any() and (reward == 0).all()
    assert infos["env_restarted"].tolist() == [True, True]
    for i, failure in enumerate(infos["env_failure"]):
        # locally "env server 1 (envs [1]) died: ..."; from a host "env host H (envs [1]): " before its text
        assert f"(envs [{i}])" in failure and "died" in failure, infos["env_failure"]


def test_restarts_used_up_raise_restart_limit_error_with_its_fields(make):
    """Every env's server dies at each of its first steps: the first failure restarts it (the step
    reports its envs restarted), the next one is past ``max_restarts=1``."""
    envs = dying(make)
    servers = [server["envs"] for server in envs.servers]
    envs.reset(seed=0)
    _, _, _, truncated, infos = envs.step(np.zeros(2, np.int64))
    assert truncated.all() and infos["env_restarted"].all()
    with pytest.raises(portal_shm.errors.RestartLimitError) as info:
        for _ in range(4):
            envs.step(np.zeros(2, np.int64))
    error = info.value
    assert error.env_indices in servers, (error.env_indices, servers)
    assert error.restarts == 1
    assert isinstance(error.runtime, str) and error.runtime
    assert "max_restarts" in str(error)


def test_a_misspelt_vector_option_is_refused_at_construction(make):
    with pytest.raises(Exception, match="ring_dpeth") as info:
        make("CartPole-v1", 2, vector_kwargs={"ring_dpeth": 3})
    assert isinstance(info.value, (TypeError, portal_shm.errors.HostPolicyError)), type(info.value)


def test_a_wait_past_its_timeout_raises_and_close_frees_the_hung_envs(make):
    envs = make(FAULTY, 2, hosts=2, fault="hang", phase="step", after=1)
    pids = server_pids(make, envs)
    closer = threading.Thread(target=envs.close, daemon=True)
    try:
        envs.reset(seed=0)
        envs.step_async(np.zeros(2, np.int64))
        started = time.monotonic()
        with pytest.raises(portal_shm.errors.PortalTimeoutError) as info:
            envs.step_wait(timeout=0.5)
        assert isinstance(info.value, multiprocessing.TimeoutError)  # as AsyncVectorEnv's
        assert time.monotonic() - started < 5
        closer.start()
        closer.join(10)
        closed = not closer.is_alive()
        freed = closed and wait_gone(pids, 5)
    finally:
        for pid in pids:  # a kind that keeps them: end them here, so that its close and hosts can end
            if not pid_gone(pid):
                os.kill(pid, signal.SIGKILL)
        if closer.ident is not None:
            closer.join(60)
    assert closed, "close() did not return within 10 s"
    assert freed, f"env servers {pids} outlived close() by 5 s"


def test_stats_count_every_env_and_give_a_verdict(make):
    envs = make("CartPole-v1", 2)
    envs.reset(seed=0)
    for _ in range(200):
        envs.step(np.zeros(2, np.int64))
    time.sleep(0.7)  # idle servers copy their last counts into the ring within half a second
    stats = envs.stats(window=5.0)
    assert [e["env"] for e in stats["envs"]] == [0, 1]
    assert [e["steps"] for e in stats["envs"]] == [200, 200]
    assert all(e["latency_us"] and e["latency_us"]["p50"] > 0 for e in stats["envs"])
    assert sorted(i for server in stats["servers"] for i in server["envs"]) == [0, 1]
    assert [s["envs"] for s in stats["servers"]] == [s["envs"] for s in envs.servers]
    assert 0 <= stats["agent"]["away"] <= 1 and stats["steps_per_s"] > 0
    assert stats["bound"]["verdict"] in ("env", "agent", "transport", "straggler"), stats["bound"]
    with pytest.raises(ValueError, match="window"):
        envs.stats(window=-1)


def test_per_env_calls_touch_only_the_envs_they_name(make):
    envs = make("CartPole-v1", 3, hosts=2)
    envs.reset(seed=0)
    envs.set_attr_envs([2, 0], "marker", ["two", "zero"])
    assert envs.get_attr_envs([0, 2], "marker") == ("zero", "two")
    assert envs.call_envs([2], "get_wrapper_attr", "marker") == ("two",)
    with pytest.raises(portal_shm.EnvError):
        envs.get_attr_envs([1], "marker")  # env 1 never got one: its error alone ...
    assert envs.get_attr_envs([0], "marker") == ("zero",)  # ... and the portal goes on
    envs.set_attr_envs([1], "marker", "one")
    assert envs.get_attr("marker") == ("zero", "one", "two")
    for bad in ([], [3], [0, 0]):
        with pytest.raises(ValueError, match="env"):
            envs.get_attr_envs(bad, "marker")


def test_call_refuses_what_has_a_method_of_its_own_as_async_vector_env_does(make):
    envs = make("CartPole-v1", 2)
    envs.reset(seed=0)
    for name in ("reset", "step", "close"):
        with pytest.raises(ValueError, match=f"use `{name}` directly"):
            envs.call(name)
        with pytest.raises(ValueError, match=f"use `{name}` directly"):
            envs.call_envs([1], name)
    assert envs.call("get_wrapper_attr", "render_mode") == (None, None)  # and the portal goes on


def test_render_and_seeds_give_one_value_per_env_as_sync_vector_env_does(make):
    envs = make("CartPole-v1", 3, hosts=2)
    reference = sync(3)
    envs.reset(seed=5)
    reference.reset(seed=5)
    assert envs.render() == reference.render() == (None, None, None)  # no render_mode: each env's None
    assert envs.np_random_seed == tuple(env.np_random_seed for env in reference.envs) == (5, 6, 7)


def test_lockstep_portals_refuse_the_async_batch_calls_by_name(make):
    envs = make("CartPole-v1", 2)
    envs.reset(seed=0)
    for call in (lambda: envs.send(np.zeros(2, np.int64)), envs.recv, envs.async_reset):
        with pytest.raises(portal_shm.PortalError, match=r"is for async batches: create the portal with batch_size"):
            call()
    envs.step(np.zeros(2, np.int64))  # the portal goes on


BAD_MASKS = [
    pytest.param([True, False, True], TypeError, "must be a numpy array", id="a-list"),
    pytest.param(np.ones(2, bool), ValueError, r"must have shape `\(3,\)`", id="wrong-shape"),
    pytest.param(np.ones(3, np.int64), TypeError, "must have `dtype=np.bool_`", id="wrong-dtype"),
    pytest.param(np.zeros(3, bool), ValueError, "at least one True value", id="all-false"),
]


@pytest.mark.parametrize("mask, error, text", BAD_MASKS)
def test_a_bad_reset_mask_raises_gymnasiums_error_and_the_portal_goes_on(make, mask, error, text):
    envs = make("CartPole-v1", 3, hosts=2, vector_kwargs={"autoreset_mode": "Disabled"})
    first, _ = envs.reset(seed=0)
    first = np.array(first)
    options = {"reset_mask": mask}
    with pytest.raises(error, match=text):
        envs.reset(options=options)
    assert options == {"reset_mask": mask}  # the caller's dict is left as it was
    obs, _ = envs.reset(seed=0, options={"reset_mask": np.array([False, True, False])})
    np.testing.assert_array_equal(obs, first)  # env 1 reset with its seed again, the others kept theirs


def test_set_attr_of_the_wrong_length_raises_gymnasiums_error(make):
    envs = make("CartPole-v1", 3, hosts=2)
    envs.reset(seed=0)
    with pytest.raises(ValueError, match="Got `2` values for 3 environments"):
        envs.set_attr("marker", ["a", "b"])
    envs.set_attr("marker", ("a", "b", "c"))
    assert envs.get_attr("marker") == ("a", "b", "c")


WALK = "portal_shm.server.example_envs:RandomWalkEnv"


def test_a_saved_state_replays_in_other_envs_and_forks(make):
    envs = make(WALK, 4, hosts=2)
    envs.reset(seed=3)
    actions = [np.array([t % 2, 1, 0, (t // 3) % 2], np.int64) for t in range(25)]
    for t in range(7):
        obs, *_ = envs.step(actions[t])
    saved_obs = obs.copy()
    states = envs.get_state([0, 3])
    assert all(isinstance(state, bytes) for state in states)
    after = []
    for t in range(7, 25):
        obs, reward, terminated, truncated, _ = envs.step(actions[t])
        after.append((obs.copy(), reward.copy(), truncated.copy()))
    # env 0's state into envs 1 and 2 (a fork), env 3's back into env 3, on other servers and hosts
    obs, infos = envs.set_state([states[0], states[0], states[1]], [1, 2, 3])
    assert obs[1] == obs[2] == saved_obs[0] and obs[3] == saved_obs[3]
    for t, (want_obs, want_reward, want_truncated) in zip(range(7, 25), after):
        a = actions[t]
        obs, reward, _, truncated, _ = envs.step(np.array([a[0], a[0], a[0], a[3]], np.int64))
        assert obs[1] == obs[2] == want_obs[0] and obs[3] == want_obs[3]
        assert reward[1] == reward[2] == want_reward[0] and reward[3] == want_reward[3]
        assert truncated[1] == want_truncated[0] and truncated[3] == want_truncated[3]


def test_a_state_is_refused_by_an_env_of_another_id(make):
    envs = make(WALK, 2)
    envs.reset(seed=0)
    other = make("CartPole-v1", 1)
    other.reset(seed=0)
    with pytest.raises(portal_shm.EnvError, match="no state adapter|allow_pickle"):
        other.get_state([0])
    state = envs.get_state([0])[0]
    with pytest.raises(portal_shm.EnvError, match="cannot be restored into env"):
        other.set_state([state], [0])
    with pytest.raises(ValueError, match="one state"):
        envs.set_state([state, state], [0])


def test_record_video_renders_only_the_chosen_env_and_writes_its_episodes(make, tmp_path):
    pytest.importorskip("imageio.v2", reason="RecordVideo needs the video extra (imageio, imageio-ffmpeg)")
    from testkit.record_video import frame_count

    envs = make(
        "portal_shm.server.example_envs:NullEnv", 4, hosts=2, shape=(8, 8, 3), episode_length=5, render_mode="rgb_array"
    )
    recorder = portal_shm.RecordVideo(envs, str(tmp_path), env_indices=[2], every_n_episodes=1)
    recorder.reset(seed=0)
    for _ in range(12):  # two episodes of 5 steps, each after its reset step (NextStep)
        _, _, _, _, infos = recorder.step(recorder.action_space.sample())
        assert "_portal_frame" not in infos
    assert recorder.get_attr("renders") == (0, 0, 10, 0)
    recorder.close()
    assert [frame_count(path) for path in recorder.videos] == [5, 5]


ATARI = breakout_options(40)  # short episodes: every rollout crosses autoresets
NATIVE = "ale_py.AtariVectorEnv"


def atari_in_process(n: int, mode: str = "NextStep"):
    pytest.importorskip("ale_py.vector_env", reason="ale-py (the atari extra) is not installed")
    return breakout_in_process(n, mode, 40)


@pytest.mark.parametrize("mode", ["NextStep", "SameStep"])
def test_servers_hosting_a_native_vector_env_equal_it_in_process(make, mode):
    """``presets.atari_vector``: each env server's games stepped by one AtariVectorEnv (two servers,
    on two hosts where hosted) give what AtariVectorEnv gives in the agent's process, and say so."""
    reference = atari_in_process(4, mode)
    try:
        envs = make(
            ATARI_VECTOR, 4, vector_kwargs={"envs_per_server": 2, "autoreset_mode": mode}, hosts=2, env_kwargs=ATARI
        )
        assert [server["hosting"] for server in envs.servers] == [NATIVE, NATIVE]
        seeds = [21, 22, 23, 24]
        obs, infos = envs.reset(seed=seeds)
        want_obs, want_infos = reference.reset(seed=np.array(seeds))
        np.testing.assert_array_equal(obs, want_obs)
        rng, ends = np.random.default_rng(3), 0
        for _ in range(100):
            actions = rng.integers(0, 4, 4)
            got, want = envs.step(actions), reference.step(actions)
            for a, b in zip(got[:4], want[:4]):
                np.testing.assert_array_equal(a, b)
            np.testing.assert_array_equal(got[4]["lives"], want[4]["lives"])
            ended = got[2] | got[3]
            ends += int(ended.sum())
            for i in np.flatnonzero(ended) if mode == "SameStep" else ():
                np.testing.assert_array_equal(got[4]["final_obs"][i], want[4]["final_obs"][i])
        assert ends >= 4
        assert [server["hosting"] for server in envs.stats()["servers"]] == [NATIVE, NATIVE]
    finally:
        reference.close()


def test_async_batches_of_native_servers_follow_it_in_process(make):
    """Batches of one server each (2 of 4 envs): each server's envs follow an AtariVectorEnv of their own."""
    references = [atari_in_process(2), atari_in_process(2)]  # envs 0-1 and 2-3
    try:
        envs = make(ATARI_VECTOR, 4, vector_kwargs={"envs_per_server": 2, "batch_size": 2}, hosts=2, env_kwargs=ATARI)
        seeds = [31, 32, 33, 34]
        expected: dict = {}  # env -> what its reference gave last: (obs,) after a reset, else the step

        def expect(server: int, result: tuple) -> None:
            for j in range(2):
                expected[2 * server + j] = tuple(value[j] for value in result)

        def check(result: tuple, ids: list) -> None:
            for j, i in enumerate(ids):
                want = expected.pop(i)
                for name, got, value in zip(("obs", "reward", "terminated", "truncated"), result, want):
                    np.testing.assert_array_equal(got[j], value, err_msg=f"{name} of env {i}")

        for server, reference in enumerate(references):
            expect(server, reference.reset(seed=np.array(seeds[2 * server : 2 * server + 2]))[:1])
        obs, infos = envs.reset(seed=seeds)
        ids = infos["env_id"].tolist()
        check((obs,), ids)
        rng, seen, ends = np.random.default_rng(5), set(ids), 0
        for _ in range(120):
            assert ids in ([0, 1], [2, 3]), ids  # whole servers
            actions = rng.integers(0, 4, 2)
            envs.send(actions, np.array(ids))
            expect(ids[0] // 2, references[ids[0] // 2].step(actions)[:4])
            *result, infos = envs.recv()
            ids = infos["env_id"].tolist()
            check(tuple(result), ids)
            seen.update(ids)
            ends += int((result[2] | result[3]).sum())
        assert seen == {0, 1, 2, 3} and ends >= 4
    finally:
        for reference in references:
            reference.close()
