"""A host's tenants as attackers (DESIGN.md, "The host as a server with tenants"), against real
``portal-shm host`` processes on 127.0.0.1 with real CURVE keys.

Each test runs an honest agent beside the attack (``testkit.hostile.HonestAgent``: a remote portal stepping
in a thread, every step equal to gymnasium's SyncVectorEnv) and checks that the attack ended at
most the attacker's own session, that the host process lives on, and that what the attack made the
host hold (memory, descriptors, sessions, env servers) stayed within its limits and came back.
Refusals are matched on the ``portal-shm host`` flag they name, nothing else of their wording.
"""

import os
import re
import signal
import socket
import threading
import time

import gymnasium as gym
import numpy as np
import pytest
import zmq

import portal_shm
from portal_shm.wire import protocol as P
from testkit.compare import assert_same
from testkit.hostile import HonestAgent, RawClient, action_frames, host_leaks, texts, zstd_bomb
from testkit.hosts import EXAMPLE_ENVS, HostProcess, Keys, add_agent_key
from testkit.procs import descendants, eventually, fd_count, is_zygote, peak_rss_bytes, rss_bytes

pytestmark = pytest.mark.integration

CLASHING = "portal_shm.server.example_envs:ClashingInfosEnv"
FAULTY = "portal_shm.server.example_envs:FaultyEnv"
SLOW = "portal_shm.server.example_envs:SlowEnv"
NULL = "portal_shm.server.example_envs:NullEnv"
HUGE = "portal_shm.server.example_envs:HugeSpaceEnv"
MiB = 1 << 20


@pytest.fixture(scope="module")
def keys(tmp_path_factory):
    """The agent key the honest agents use, and two more keys the hosts accept (other tenants)."""
    keys = Keys(str(tmp_path_factory.mktemp("keys")))
    keys.tenant = add_agent_key(keys, "tenant")
    keys.thief = add_agent_key(keys, "thief")
    return keys


@pytest.fixture
def start_host(keys):
    """A fresh host per test (half a second): one attack's damage is never the next test's."""
    started = []

    def start(*flags):
        host = HostProcess(keys, *EXAMPLE_ENVS, *flags)
        started.append(host)
        return host

    yield start
    for host in started:
        host.stop()


def remote(env_id, n, host, keys, client_key=None, links=1, **kwargs):
    """``n`` envs of ``env_id`` on ``host``, over ``links`` connections (sessions) to it."""
    kwargs.setdefault("heartbeat_timeout", 5.0)
    return portal_shm.make_vec(
        env_id,
        n,
        backend="remote",
        hosts=[host.address] * links,
        host_key=keys.host_key,
        client_key=client_key or keys.agent,
        **kwargs,
    )


def _close_quietly(envs):
    try:
        envs.close()
    except Exception as exc:  # a portal whose host is gone may say so on close
        print(f"close: {exc!r}")


def _host_alive(host):
    assert host.process.poll() is None, f"the host exited with {host.process.returncode}:\n{host.log[-4000:]}"


def _own_error(outcome):
    """The attacker's outcome is its own session's error (or nothing), never a lost host."""
    assert outcome is None or isinstance(outcome, portal_shm.PortalError), repr(outcome)
    assert not isinstance(outcome, portal_shm.errors.HostLostError), f"the host stopped answering: {outcome}"


# -- a. hostile env infos ---------------------------------------------------------------------------------

# name: (num_envs, links, env kwargs, vector kwargs)
CLASH_PATHS = {
    "inline": (2, 1, {}, {}),  # lockstep steps the host's router starts and finishes itself
    "threaded": (2, 1, {"step_ms": 40}, {}),  # steps past the router's 20 ms, finished by the session's thread
    "whole_batches": (4, 2, {}, {"batch_size": 2}),  # each session's batch is all its envs: its thread steps them
    "async_batches": (4, 1, {}, {"batch_size": 2}),  # sub-batches the session's thread ships as they finish
}


def _batched(env_infos):
    """gymnasium's batching of ``env_infos`` (one dict per env of a batch; None: it cannot either)."""
    batcher = gym.vector.VectorEnv()
    batcher.num_envs = len(env_infos)
    infos: dict = {}
    try:
        for j, info in enumerate(env_infos):
            infos = batcher._add_info(infos, info, j)
    except Exception:
        return None
    return infos


def _clash_info(env):
    """What the clashing env ``env`` (reset with seed ``env``) says at each step."""
    return {"d": {"_x": {"y": 1}}} if env % 2 == 0 else {"d": {"x": 1}}


WAIT = 15.0  # seconds a step of the clashing envs may take: no answer at all is the host's failure


def _drive_clashing(envs, num_envs, steps=6):
    """Step the clashing envs (env ``i`` reset with seed ``i``): their session's error, or None when
    every batch's infos came out as gymnasium batches them. A step unanswered within ``WAIT`` is the
    portal's own PortalTimeoutError: the session's error got lost on the way."""
    batched = envs.batch_size < num_envs
    stepped = set()  # envs whose last request was a step (the others are resetting)
    try:
        _, infos = envs.reset(seed=0)
        ids = infos.get("env_id")
        for _ in range(steps):
            if batched:
                envs.send(np.zeros(len(ids), np.int64), ids)
                stepped.update(ids.tolist())
                *_, infos = envs.recv(timeout=WAIT)
                ids = infos["env_id"]
                batch = ids.tolist()
            else:
                envs.step_async(np.zeros(num_envs, np.int64))
                *_, infos = envs.step_wait(timeout=WAIT)
                batch = list(range(num_envs))
                stepped.update(batch)
            expected = _batched([_clash_info(env) if env in stepped else {} for env in batch])
            assert expected is not None, f"envs {batch}' infos cannot be batched, yet came without an error"
            assert_same({k: v for k, v in infos.items() if k not in ("env_id", "_env_id")}, expected, "infos")
    except portal_shm.PortalError as exc:
        return exc
    return None


@pytest.mark.parametrize("path", list(CLASH_PATHS))
def test_clashing_infos_end_at_most_their_own_session(start_host, keys, path):
    num_envs, links, env_kwargs, vector = CLASH_PATHS[path]
    host = start_host()
    with HonestAgent(host.address, keys) as honest:
        envs = remote(CLASHING, num_envs, host, keys, links=links, vector_kwargs=vector, **env_kwargs)
        try:
            outcome = _drive_clashing(envs, num_envs)
        finally:
            _close_quietly(envs)
        print(f"clashing infos ({path}): {outcome!r}")
        _host_alive(host)
        _own_error(outcome)
        assert not isinstance(outcome, portal_shm.errors.PortalTimeoutError), (
            f"the session's error never came: {outcome}"
        )
        honest.finish()


# -- b. faults of a session's env servers ------------------------------------------------------------------

# name: (env id, env kwargs, vector kwargs, how the fault comes)
FAULTS = {
    "kill9-inline": ("CartPole-v1", {}, {}, "kill"),
    "kill9-mid-step-threaded": (SLOW, {"step_ms": 400}, {}, "kill_mid_step"),
    "hang-inline-handed-over": (FAULTY, {"fault": "hang", "after": 2}, {"step_timeout": 1.0}, "step"),
    "hang-async-batches": (FAULTY, {"fault": "hang", "after": 2}, {"step_timeout": 1.0, "batch_size": 1}, "step"),
    "segfault-async-batches": (FAULTY, {"fault": "segfault", "after": 2}, {"batch_size": 1}, "step"),
    "garbage-reward-inline": (FAULTY, {"fault": "bad_reward", "after": 2}, {}, "step"),
}


class Stepper:
    """Steps a portal of 2 envs in lockstep, or in async batches (``send``/``recv``) where it has them."""

    def __init__(self, envs):
        self.envs = envs
        self.ids = envs.reset(seed=1)[1].get("env_id")

    def step(self):
        if self.envs.batch_size < self.envs.num_envs:
            self.envs.send(np.zeros(len(self.ids), np.int64), self.ids)
            self.ids = self.envs.recv()[4]["env_id"]
        else:
            self.envs.step(np.zeros(2, np.int64))


def _a_server(servers: set) -> int:
    """One env server of ``servers`` (the processes a session added under its host): not the zygote
    that forked them, whose death ends no server."""
    return min(pid for pid in servers if not is_zygote(pid))


def _fault(stepper, how, servers):
    """Bring the fault on; the error the victim's portal raised (None: none within a few steps)."""
    if how == "kill_mid_step":
        outcome = []

        def step():
            try:
                stepper.step()
                outcome.append(None)
            except Exception as exc:
                outcome.append(exc)

        stepping = threading.Thread(target=step)
        stepping.start()
        time.sleep(0.15)  # the step is past the router's handover: on the session's thread
        os.kill(_a_server(servers), signal.SIGKILL)
        stepping.join(30)
        return outcome[0] if outcome else TimeoutError("the step never returned")
    if how == "kill":
        os.kill(_a_server(servers), signal.SIGKILL)
    for _ in range(6):
        try:
            stepper.step()
        except Exception as exc:
            return exc
    return None


@pytest.mark.parametrize("fault", list(FAULTS))
def test_a_faulting_env_server_ends_only_its_own_session(start_host, keys, fault):
    env_id, env_kwargs, vector, how = FAULTS[fault]
    host = start_host()
    pid = host.process.pid
    with HonestAgent(host.address, keys) as honest:
        before = descendants(pid)
        victim = remote(env_id, 2, host, keys, vector_kwargs=vector, **env_kwargs)
        try:
            stepper = Stepper(victim)
            servers = descendants(pid) - before
            assert servers, "the victim's env servers are not children of the host"
            stepper.step()
            outcome = _fault(stepper, how, servers)
        finally:
            _close_quietly(victim)
        print(f"{fault}: {outcome!r}")
        _host_alive(host)
        assert outcome is not None, "the fault went unnoticed"
        _own_error(outcome)
        assert eventually(lambda: not descendants(pid) & servers, 15), "the victim's env servers outlived its close()"
        honest.finish()


# -- c. an agent that never acknowledges --------------------------------------------------------------------


def test_an_agent_that_never_acknowledges_is_dropped_at_max_unacked_bytes(start_host, keys):
    host = start_host("--max-unacked-bytes", str(2 * MiB))
    pid = host.process.pid
    with HonestAgent(host.address, keys) as honest:
        client = RawClient(host.address, keys.host_key, keys.tenant)
        client.acking = False  # every message says "ack": 0
        try:
            welcome = client.hello(NULL, 1, env_kwargs={"shape": [512, 512, 3]})  # 768 KiB a reply
            assert welcome["cmd"] == "welcome", welcome
            base = peak = rss_bytes(pid)
            refusal, replies = None, 0
            client.send({"cmd": "reset", "seed": 0})
            for _ in range(64):  # 48 MiB of replies held without the limit
                reply = client.reply(15)
                peak = max(peak, rss_bytes(pid))
                if reply["cmd"] != "result":
                    refusal = reply
                    break
                replies += 1
                client.send({"cmd": "step"}, action_frames(1))
        finally:
            client.close()
        print(f"never-acking agent: {replies} replies, host RSS {base / MiB:.0f} -> peak {peak / MiB:.0f} MiB")
        assert refusal is not None, f"the host kept {replies} unacknowledged replies of 768 KiB for a 2 MiB limit"
        assert refusal["cmd"] == "error" and re.search(r"--max-unacked-bytes", refusal.get("message", "")), refusal
        assert peak - base < 24 * MiB, f"the host's RSS grew {(peak - base) / MiB:.0f} MiB for a 2 MiB limit"
        _host_alive(host)
        honest.finish()


# -- d. a compression bomb --------------------------------------------------------------------------------


def _bomb(seq, codec, size):
    """A step whose one array claims ``size`` bytes compressed with ``codec``, in a small frame."""
    if codec == "zstd":
        payload = zstd_bomb(size)
    else:
        import lz4.block

        payload = lz4.block.compress(bytes(size), store_size=False)
    header = {"cmd": "step", "seq": seq, "ack": 0, "arrays": [["|u1", [size], codec]]}
    return [P.packb(header), payload]


def test_a_compression_bomb_is_never_inflated(start_host, keys):
    host = start_host()
    pid = host.process.pid
    with HonestAgent(host.address, keys) as honest:
        zstd = _bomb(2, "zstd", 1 << 30)  # 1 GiB of zeros in ~40 KB
        assert len(zstd[1]) < 100_000
        # from a sender with no session: nothing decoded at all
        stranger = RawClient(host.address, keys.host_key, keys.tenant)
        try:
            peak = peak_rss_bytes(pid)
            stranger.send_frames(zstd)
            answer = stranger.reply(20)
            grew = peak_rss_bytes(pid) - peak
        finally:
            stranger.close()
        assert answer["cmd"] == "unknown_session", answer
        assert grew < 64 * MiB, f"a message from a sender with no session took {grew / MiB:.0f} MiB to read"
        # from a session that agreed on no codec
        client = RawClient(host.address, keys.host_key, keys.tenant)
        try:
            welcome = client.hello("CartPole-v1", 1, codecs=[], compression="none")
            assert welcome["cmd"] == "welcome" and welcome.get("codec") == "none", welcome
            client.send({"cmd": "reset", "seed": 0})
            assert client.reply()["cmd"] == "result"
            for codec, size in (("zstd", 1 << 30), ("lz4", 1 << 27)):
                peak = peak_rss_bytes(pid)
                client.sent += 1
                client.send_frames(_bomb(client.sent, codec, size))
                refusal = client.reply(20)
                grew = peak_rss_bytes(pid) - peak
                print(
                    f"{codec} bomb of {size / MiB:.0f} MiB: {refusal.get('message')!r}, host peak RSS +{grew / MiB:.1f}"
                )
                assert refusal["cmd"] == "error", refusal
                assert re.search(r"zstd|lz4|compress|codec", refusal.get("message", "")), refusal
                assert grew < 64 * MiB, f"a {codec} frame claiming {size / MiB:.0f} MiB took {grew / MiB:.0f} MiB"
        finally:
            client.close()
        _host_alive(host)
        honest.finish()


# -- e. slowloris -----------------------------------------------------------------------------------------

# The start of a ZMTP greeting (signature and version), sent a byte at a time and never finished.
GREETING = b"\xff" + bytes(8) + b"\x7f\x03"


def test_slowloris_connections_leave_the_honest_agent_stepping(start_host, keys):
    host = start_host()
    pid = host.process.pid
    port = int(host.address.rsplit(":", 1)[1])
    with HonestAgent(host.address, keys) as honest:
        fds_before = fd_count(pid)
        context = zmq.Context()
        idle = [RawClient(host.address, keys.host_key, keys.tenant, context=context) for _ in range(200)]
        trickle = [socket.create_connection(("127.0.0.1", port)) for _ in range(50)]
        stop = threading.Event()

        def dribble():
            for byte in GREETING:
                for connection in trickle:
                    try:
                        connection.send(bytes([byte]))
                    except OSError:
                        pass
                if stop.wait(0.3):
                    return

        dribbler = threading.Thread(target=dribble)
        dribbler.start()
        try:
            assert eventually(lambda: fd_count(pid) >= fds_before + 200, 20), (fd_count(pid), fds_before)
            started = time.monotonic()
            with HonestAgent(host.address, keys, seed=5) as late:  # a new agent still gets in, and steps
                joined = time.monotonic() - started
                late.finish(20)
            print(f"slowloris: host fds {fds_before} -> {fd_count(pid)}; a new agent joined in {joined:.2f} s")
            assert joined < 10
        finally:
            stop.set()
            dribbler.join()
            for client in idle:
                client.close()
            for connection in trickle:
                connection.close()
            context.term()
        _host_alive(host)
        assert eventually(lambda: fd_count(pid) <= fds_before + 6, 15), (fd_count(pid), fds_before)
        honest.finish()


# -- a hostile env's doorbell storm -----------------------------------------------------------------------

STORM = "portal_shm.server.example_envs:DoorbellStormEnv"


@pytest.mark.parametrize("vector", [{}, {"batch_size": 1}], ids=["lockstep", "async-batches"])
def test_an_env_ringing_every_pipe_of_its_server_costs_only_its_own_session(start_host, keys, vector):
    """An env runs inside its server, so it can write to the server's doorbells: each storm is a
    burst of spurious wake-ups for its own session (whose results stay its env's), and the honest
    agent beside it keeps stepping equal to SyncVectorEnv."""
    host = start_host()
    with HonestAgent(host.address, keys) as honest:
        stormy = portal_shm.make_vec(
            STORM, 2, backend="remote", hosts=[host.address], host_key=keys.host_key, client_key=keys.tenant,
            vector_kwargs=vector, heartbeat_timeout=5.0,
        )  # fmt: skip
        try:
            ids = stormy.reset(seed=0)[1]["env_id"] if vector else None
            for t in range(1, 31):
                if vector:
                    stormy.send(np.zeros(len(ids), np.int64), ids)
                    obs, reward, terminated, truncated, infos = stormy.recv(timeout=15)
                    ids = infos["env_id"]
                    if t == 1:  # the other env's reset (a reset hands out the first batch only)
                        continue
                else:
                    obs, reward, terminated, truncated, infos = stormy.step(np.zeros(2, np.int64))
                    assert (obs == t % 2).all(), (t, obs)  # the storm's wake-ups never stand for results
                assert (reward == 1.0).all()
        finally:
            _close_quietly(stormy)
        report = honest.finish()
    _host_alive(host)
    assert report["steps"] > 20


# -- an env that wedges its server where the router looks ------------------------------------------------

WEDGING = "portal_shm.server.example_envs:WedgingEnv"


def _step_until_error(envs, steps=6):
    """Lockstep steps until one raises: that error (None: none did)."""
    for _ in range(steps):
        try:
            envs.step(np.zeros(envs.num_envs, np.int64))
        except Exception as exc:
            return exc
    return None


@pytest.mark.parametrize("how", ["writing", "promise"])
def test_an_env_that_wedges_its_server_ends_only_its_own_session(start_host, keys, how):
    """An env can write its own server's status word and ring its agent: it says "writing, results
    follow" (the early ring's state) or "done, a message follows", and then sleeps in ``step``. The
    router never waits on either: the step goes to the session's thread, whose step timeout (the
    host's ``--step-timeout``) ends the session with an error to its agent and a log line naming
    the key, the session and the env; the honest tenant's every step is answered within a second."""
    host = start_host("--step-timeout", "3")
    with HonestAgent(host.address, keys) as honest:
        wedged = remote(WEDGING, 2, host, keys, client_key=keys.tenant, env_kwargs={"how": how, "after": 3})
        try:
            wedged.reset(seed=0)
            outcome = _step_until_error(wedged)
        finally:
            _close_quietly(wedged)
        report = honest.finish()
    _host_alive(host)
    assert isinstance(outcome, portal_shm.errors.PortalTimeoutError), repr(outcome)
    assert "ended this session" in str(outcome) and "--step-timeout" in str(outcome), outcome
    assert host.wait_for_log("wedged", 5), host.log[-3000:]
    line = next(line for line in host.log.splitlines() if "wedged" in line)
    assert re.search(r"session 127\.0\.0\.1 \(tenant\.key\) #\d+: an env is wedged", line), line
    assert re.search(r"env server \d \(envs \[[\d, ]+\]\)", line), line
    assert report["max_ms"] < 1000, report


def test_sigterm_stops_a_host_whose_env_is_wedged(start_host, keys):
    """With an env asleep inside a step (the host's default step timeout is minutes), SIGTERM stops
    the daemon within seconds: the router is never the one waiting, and its close stops the
    session's servers under the step."""
    host = start_host()
    wedged = remote(WEDGING, 2, host, keys, env_kwargs={"how": "promise", "after": 1})
    outcome = []
    try:
        wedged.reset(seed=0)
        stepping = threading.Thread(target=lambda: outcome.append(_step_until_error(wedged, 1)), daemon=True)
        stepping.start()
        time.sleep(1.0)  # the step is wedged, past the router's handover
        assert stepping.is_alive(), outcome
        started = time.monotonic()
        host.process.send_signal(signal.SIGTERM)
        host.process.wait(30)
        took = time.monotonic() - started
        stepping.join(30)
    finally:
        _close_quietly(wedged)
    assert took < 20, f"the host took {took:.1f} s to stop"
    assert "stopped (SIGTERM)" in host.log, host.log[-3000:]
    assert outcome and isinstance(outcome[0], portal_shm.PortalError), outcome


# -- cheap amplifiers: sizes an agent asks for, spaces an env declares -------------------------------------


def test_a_preset_int_that_sizes_memory_is_refused_before_any_server_starts(start_host, keys):
    host = start_host("--entry-points", "portal_shm.server.example_envs:*,portal_shm.presets:atari")
    with HonestAgent(host.address, keys) as honest:
        servers, peak = set(descendants(host.process.pid)), peak_rss_bytes(host.process.pid)
        with pytest.raises(
            portal_shm.errors.HostPolicyError, match=r"stack=12000 passes this host's cap 64 .*--size-cap stack=N"
        ):
            remote("portal_shm.presets:atari", 1, host, keys, client_key=keys.tenant, stack=12000)
        assert set(descendants(host.process.pid)) <= servers  # refused at hello: no server started
        assert peak_rss_bytes(host.process.pid) - peak < 64 * MiB
        honest.finish()
    _host_alive(host)


def test_spaces_that_need_a_ring_past_the_hosts_cap_are_refused_naming_the_flag(start_host, keys):
    host = start_host("--max-ring-bytes", "64m")
    with HonestAgent(host.address, keys) as honest:
        servers = set(descendants(host.process.pid))
        with pytest.raises(portal_shm.PortalError, match=r"more than max_ring_bytes=67,108,864 .*--max-ring-bytes"):
            remote(HUGE, 2, host, keys, client_key=keys.tenant, side=4096)
        assert eventually(lambda: set(descendants(host.process.pid)) <= servers, 15)
        envs = remote(HUGE, 2, host, keys, client_key=keys.tenant, side=256)  # within the cap: served
        try:
            assert envs.reset(seed=0)[0].shape == (2, 256, 256)
        finally:
            envs.close()
        honest.finish()
    _host_alive(host)


# -- f. id theft ------------------------------------------------------------------------------------------


def _steal(thief, seq, num_envs=2):
    """Another key presenting a session's routing id: closes and steps numbered around the session's
    next number; every answer it got within a second."""
    for number in range(max(2, seq - 2), seq + 4):
        for header, arrays in (({"cmd": "close"}, ()), ({"cmd": "step"}, action_frames(num_envs))):
            thief.send({**header, "seq": number, "ack": 0}, arrays, numbered=False)
    answers = []
    while (answer := thief.recv(1.0)) is not None:
        answers.append(answer)
    return answers


def test_a_stolen_routing_id_is_refused_and_the_session_stays_its_owners(start_host, keys):
    from portal_shm.bench.link import Link

    host = start_host()
    with HonestAgent(host.address, keys) as honest:
        # while the owner's connection is up
        thief = RawClient(host.address, keys.host_key, keys.thief, routing_id=honest.routing_id)
        try:
            answers = _steal(thief, honest.next_seq)
        finally:
            thief.close()
        assert not [a for a in answers if a.get("cmd") == "result"], answers
        # while the owner's connection is cut (a proxy between them): its id is free at the host
        with Link(host.address) as link:
            with HonestAgent(link.address, keys, seed=3, heartbeat_timeout=15.0) as owner:
                assert eventually(lambda: owner.steps >= 5, 10)
                since = len(host.log)
                link.cut(3.0)
                time.sleep(0.3)  # the host has seen the connection go
                thief = RawClient(host.address, keys.host_key, keys.thief, routing_id=owner.routing_id)
                try:
                    answers = _steal(thief, owner.next_seq)
                finally:
                    thief.close()
                print(f"id theft: the thief got {[a.get('cmd') for a in answers]}")
                assert not [a for a in answers if a.get("cmd") == "result"], answers
                owner.finish(20, timeout=30)  # reconnected once the cut was over: its session intact
        assert host.wait_for_log("refused", 5, since), host.log[since:]
        _host_alive(host)
        honest.finish()


# -- g. sessions and descriptors ---------------------------------------------------------------------------


def _limits(log):
    """The banner's limits: from its line starting "  limits" to the line of what agents may run."""
    found = re.search(r"^  limits.*?(?=^  agents may run)", log, re.M | re.S)
    return found.group(0) if found else ""


def test_sessions_per_key_and_per_host_are_capped_and_their_descriptors_come_back(start_host, keys):
    host = start_host("--max-sessions", "5", "--max-sessions-per-agent", "3")
    limits = _limits(host.log)
    assert re.search(r"\b5\b", limits) and re.search(r"\b3\b", limits), host.log
    pid = host.process.pid
    with HonestAgent(host.address, keys) as honest:  # session 1
        fds_before, servers_before = fd_count(pid), descendants(pid)
        clients = []
        try:
            for _ in range(3):  # sessions 2-4, of one key, each on a routing id of its own
                clients.append(RawClient(host.address, keys.host_key, keys.tenant))
                welcome = clients[-1].hello("CartPole-v1")
                assert welcome["cmd"] == "welcome", welcome
            with pytest.raises(portal_shm.PortalError, match=r"--max-sessions-per-agent"):
                remote("CartPole-v1", 1, host, keys, client_key=keys.tenant)
            clients.append(RawClient(host.address, keys.host_key, keys.agent))  # another key gets in: session 5
            assert clients[-1].hello("CartPole-v1")["cmd"] == "welcome"
            clients[-1].send({"cmd": "reset", "seed": 0})
            assert clients[-1].reply()["cmd"] == "result"
            seq = clients[-1].send({"cmd": "step"}, action_frames(1))
            reply = clients[-1].reply()
            assert reply["cmd"] == "result" and reply.get("re") == seq, reply
            third = RawClient(host.address, keys.host_key, keys.thief)  # the host is full
            try:
                refusal = third.hello("CartPole-v1")
            finally:
                third.close()
            assert refusal["cmd"] == "error" and re.search(r"--max-sessions(?!-)", refusal.get("message", "")), refusal
            for client in clients:
                seq = client.send({"cmd": "close"})
                reply = client.reply()
                assert reply["cmd"] == "result" and reply.get("re") == seq, reply
        finally:
            for client in clients:
                client.close()
        assert eventually(lambda: descendants(pid) <= servers_before, 15), "closed sessions left env servers"
        assert eventually(lambda: fd_count(pid) <= fds_before + 6, 15), (fd_count(pid), fds_before)
        _host_alive(host)
        honest.finish()


def test_a_session_past_max_fds_is_refused_before_anything_starts(start_host, keys):
    host = start_host("--max-fds", "120")
    pid = host.process.pid
    with HonestAgent(host.address, keys) as honest:
        before = descendants(pid)
        client = RawClient(host.address, keys.host_key, keys.tenant)
        try:
            refusal = client.hello("CartPole-v1", 64, vector={"envs_per_server": 1})  # 64 env servers
        finally:
            client.close()
        assert refusal["cmd"] == "error" and re.search(r"--max-fds", refusal.get("message", "")), refusal
        assert descendants(pid) <= before, "env servers were started for a session past the limit"
        _host_alive(host)
        honest.finish()


# -- h. the host's internal command --------------------------------------------------------------------------


def test_the_hosts_internal_finish_command_is_refused_from_the_network(start_host, keys):
    host = start_host()
    with HonestAgent(host.address, keys) as honest:
        stranger = RawClient(host.address, keys.host_key, keys.tenant)
        try:
            stranger.send({"cmd": "_finish"})
            assert stranger.reply()["cmd"] in ("error", "unknown_session")
        finally:
            stranger.close()
        client = RawClient(host.address, keys.host_key, keys.tenant)
        try:
            assert client.hello("CartPole-v1")["cmd"] == "welcome"
            client.send({"cmd": "reset", "seed": 0})
            assert client.reply()["cmd"] == "result"
            since = len(host.log)
            seq = client.send({"cmd": "_finish"})
            refusal = client.reply(5)
            assert refusal["cmd"] == "error" and re.search(r"refused|_finish", refusal.get("message", "")), refusal
            assert host.wait_for_log("refused", 5, since), host.log[since:]
            # never delivered: the session's numbering did not move, and it steps on
            client.sent = seq - 1
            seq = client.send({"cmd": "step"}, action_frames(1))
            reply = client.recv(5)
            assert reply is not None and reply["cmd"] == "result" and reply.get("re") == seq, reply
        finally:
            client.close()
        _host_alive(host)
        honest.finish()


# -- i. what a host tells its agents of itself ---------------------------------------------------------------


def test_welcomes_and_errors_tell_no_host_pids_or_paths(start_host, keys):
    host = start_host()
    pid = host.process.pid
    with HonestAgent(host.address, keys) as honest:
        before = descendants(pid)
        client = RawClient(host.address, keys.host_key, keys.tenant)
        try:
            welcome = client.hello("CartPole-v1", 2)
            assert welcome["cmd"] == "welcome", welcome
            servers = descendants(pid) - before
            assert servers
            leaks = [leak for text in texts(welcome) for leak in host_leaks(text, servers | {pid})]
            assert not leaks, (leaks, welcome)
            client.send({"cmd": "close"})
            assert client.reply()["cmd"] == "result"
        finally:
            client.close()
        for env_id, env_kwargs, how in ((FAULTY, {"fault": "raise", "after": 1}, "step"), ("CartPole-v1", {}, "kill")):
            before = descendants(pid)
            envs = remote(env_id, 2, host, keys, **env_kwargs)
            try:
                envs.reset(seed=0)
                servers = descendants(pid) - before
                if how == "kill":
                    os.kill(_a_server(servers), signal.SIGKILL)
                with pytest.raises(portal_shm.PortalError) as info:
                    for _ in range(3):
                        envs.step(np.zeros(2, np.int64))
            finally:
                _close_quietly(envs)
            text = str(info.value)
            print(f"{type(info.value).__name__} as the agent sees it:\n{text}")
            assert not host_leaks(text, servers | {pid}), (host_leaks(text, servers | {pid}), text)
        _host_alive(host)
        honest.finish()


# -- j. a Ray-placed host ---------------------------------------------------------------------------------


def test_clashing_infos_on_a_ray_placed_host_end_only_their_own_session():
    pytest.importorskip("ray")
    from testkit.ray_cluster import shutdown, start_cluster

    cluster = start_cluster(workers=1)
    try:
        policy = portal_shm.backends.HostPolicy(entry_points=("portal_shm.server.example_envs:*",))
        honest = portal_shm.make_vec("CartPole-v1", 2, backend="ray", num_hosts=1)
        expected = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1")] * 2)
        clashing = portal_shm.make_vec(
            CLASHING, 2, backend="ray", num_hosts=1, host_policy=policy, heartbeat_timeout=5.0
        )
        try:
            rng = np.random.default_rng(0)
            assert_same(honest.reset(seed=0), expected.reset(seed=0))
            outcome = _drive_clashing(clashing, 2)
            _own_error(outcome)
            assert not isinstance(outcome, portal_shm.errors.PortalTimeoutError), (
                f"the session's error never came: {outcome}"
            )
            assert clashing.placement.alive(0), "the Ray-placed host stopped serving with the session"
            for step in range(30):
                actions = rng.integers(0, 2, 2)
                assert_same(honest.step(actions), expected.step(actions), f"step {step}")
        finally:
            _close_quietly(clashing)
            _close_quietly(honest)
            expected.close()
    finally:
        shutdown(cluster)


# -- the load run, short -----------------------------------------------------------------------------------


@pytest.mark.slow  # a soak, short
def test_a_short_load_run_stays_flat_and_leaves_nothing_behind(tmp_path):
    from benchmarks.host_load import run_load

    report = run_load(minutes=0.3, agents=3, sessions_per_agent=2, interval=1.0, churn_every=1.0, root=str(tmp_path))
    assert not report["errors"], report["errors"]
    assert report["reference"]["steps"] > 50 and report["sessions"]["closed"] >= 5, report
    assert all(report["flat"].values()), report["summary"]
    assert report["left_behind"]["ok"], report["left_behind"]
