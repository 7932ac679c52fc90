"""The attacker's toolkit of the hostile-tenant tests, and the honest agent beside each attack.

A host serves agents it does not control (DESIGN.md, "The host as a server with tenants"). These
helpers let a test be such an agent: ``RawClient`` speaks the host protocol message by message
over a real CURVE connection (any routing id, any numbering, any frames). ``HonestAgent`` is the
tenant that must not notice: a remote portal stepping in a thread, every step compared with
gymnasium's SyncVectorEnv, its latency kept. Another key the host accepts
(``testkit.hosts.add_agent_key``) and what the attack makes the host process hold
(``testkit.procs``) are shared with the benchmarks.
"""

from __future__ import annotations

import re
import secrets
import threading
import time
from typing import Any, Iterable, Optional

import gymnasium as gym
import numpy as np
import zmq
import zmq.auth

import portal_shm
from portal_shm.remote import frames
from portal_shm.wire import protocol as P
from testkit.compare import assert_same, snapshot
from testkit.procs import eventually


def texts(value: Any) -> Iterable[str]:
    """Every string (and decodable bytes) inside a decoded message, keys included."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, bytes):
        yield value.decode("utf-8", "replace")
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from texts(key)
            yield from texts(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from texts(item)


# An absolute path of two parts or more, not inside a URL and not the tail ``redact`` keeps
# (".../gymnasium/core.py").
ABSOLUTE_PATH = re.compile(r"(?<![\w.~/:])/[\w.+-]+/[\w.+-]+")


def host_leaks(text: str, pids: Iterable[int]) -> list:
    """What of the host's own internals ``text`` tells: its env servers' pids, its absolute paths."""
    found = [f"pid {pid}" for pid in pids if re.search(rf"(?<!\d){pid}(?!\d)", text)]
    return found + ABSOLUTE_PATH.findall(text)


# -- a hostile agent ------------------------------------------------------------------------------------


def hello(
    env_id: str,
    num_envs: int = 1,
    env_kwargs: Optional[dict] = None,
    vector: Optional[dict] = None,
    codecs: Iterable[str] = (),
    compression: str = "none",
) -> dict:
    """A hello as the real agent sends it (``RemoteVectorPortal._connect``), without its number."""
    return {
        "cmd": "hello",
        "protocol": frames.PROTOCOL,
        "env_id": env_id,
        "env_kwargs": env_kwargs or {},
        "runtime": "process",
        "runtime_options": {},
        "vector": {"autoreset_mode": "NextStep", **(vector or {})},
        "num_envs": num_envs,
        "codecs": list(codecs),
        "compression": compression,
    }


class RawClient:
    """A DEALER speaking the host protocol by hand over CURVE with ``client_key`` (a secret key file).

    ``send`` numbers a message as the real agent does (``seq`` its running number, ``ack`` the
    highest number received without a gap), unless the test numbers it itself; ``acking=False``
    acknowledges nothing, ever. ``recv`` gives headers only (array specs left in ``"arrays"``).
    """

    def __init__(
        self,
        address: str,
        host_key: str,
        client_key: str,
        routing_id: Optional[bytes] = None,
        context: Optional[zmq.Context] = None,
    ) -> None:
        self.context = context or zmq.Context.instance()
        public, secret = zmq.auth.load_certificate(client_key)
        server, _ = zmq.auth.load_certificate(host_key)
        socket = self.socket = self.context.socket(zmq.DEALER)
        self.routing_id = routing_id or secrets.token_bytes(12)
        socket.setsockopt(zmq.ROUTING_ID, self.routing_id)
        socket.setsockopt(zmq.LINGER, 0)
        socket.setsockopt(zmq.CURVE_PUBLICKEY, public)
        socket.setsockopt(zmq.CURVE_SECRETKEY, secret)
        socket.setsockopt(zmq.CURVE_SERVERKEY, server)
        socket.connect(address)
        self.sent = 0  # our last number
        self.received = 0  # the host's highest number we hold without a gap
        self.acking = True

    def send(self, header: dict, arrays: Any = (), numbered: bool = True) -> int:
        if numbered:
            self.sent += 1
            header = {**header, "seq": self.sent, "ack": self.received if self.acking else 0}
        self.send_frames(frames.pack(header, arrays))
        return header.get("seq", 0)

    def send_frames(self, data: list) -> None:
        self.socket.send_multipart(data, copy=False)

    def recv(self, timeout: float = 10.0) -> Optional[dict]:
        """The next message's header (None: nothing within ``timeout``); pongs are skipped."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not self.socket.poll(max(1, int(left * 1000))):
                return None
            data = self.socket.recv_multipart()
            header = P.unpackb(data[0])
            seq = header.get("seq")
            if isinstance(seq, int) and seq == self.received + 1:
                self.received = seq
            if header.get("cmd") != "pong":
                return header

    def reply(self, timeout: float = 10.0) -> dict:
        header = self.recv(timeout)
        assert header is not None, f"the host did not answer within {timeout} s"
        return header

    def hello(self, env_id: str, num_envs: int = 1, timeout: float = 30.0, **fields: Any) -> dict:
        """Say hello (message 1) and return the host's answer: a welcome or an error."""
        self.send(hello(env_id, num_envs, **fields))
        return self.reply(timeout)

    def close(self) -> None:
        self.socket.close(0)


def action_frames(num_envs: int) -> list:
    """Actions of a ``Discrete`` action space, as the agent sends them: one int64 array."""
    return [np.zeros(num_envs, np.int64)]


def zstd_bomb(size: int) -> bytes:
    """A valid zstd frame of ``size`` zero bytes (its content size in the frame header): kilobytes."""
    import zstandard

    compressor = zstandard.ZstdCompressor(level=3, write_content_size=True).compressobj(size=size)
    chunk = bytes(1 << 20)
    parts = [compressor.compress(chunk[: min(len(chunk), size - done)]) for done in range(0, size, len(chunk))]
    return b"".join(parts) + compressor.flush()


# -- the honest agent beside each attack -----------------------------------------------------------------


class HonestAgent:
    """A remote portal of ``env_id`` on ``address`` stepping seeded random actions in a thread, every
    result compared with gymnasium's SyncVectorEnv of the same env; per-step latency is kept.

    Built (and reset) in the caller's thread, so a host that refuses it fails the test at once. Use
    as a context manager and call ``finish`` after the attack: it waits for ``more`` further steps,
    stops, closes and raises what went wrong on the way (a mismatch, an error).
    """

    def __init__(
        self,
        address: str,
        keys: Any,
        env_id: str = "CartPole-v1",
        num_envs: int = 2,
        seed: int = 0,
        client_key: Optional[str] = None,
        pause: float = 0.002,
        **kwargs: Any,
    ) -> None:
        kwargs.setdefault("heartbeat_timeout", 5.0)
        self.num_envs, self.pause = num_envs, pause
        self.envs = portal_shm.make_vec(
            env_id,
            num_envs,
            backend="remote",
            hosts=[address],
            host_key=keys.host_key,
            client_key=client_key or keys.agent,
            **kwargs,
        )
        self.expected = gym.vector.SyncVectorEnv([lambda: gym.make(env_id)] * num_envs)
        self.rng = np.random.default_rng(seed)
        self.actions = int(self.envs.single_action_space.n)
        self.steps = 0
        self.latencies: list = []
        self.error: Optional[BaseException] = None
        self._stop = threading.Event()
        try:
            assert_same(snapshot(self.envs.reset(seed=seed)), self.expected.reset(seed=seed), "honest reset")
        except BaseException:
            self.close()
            raise
        self.thread = threading.Thread(target=self._run, name="honest-agent", daemon=True)
        self.thread.start()

    @property
    def routing_id(self) -> bytes:
        """The routing id of the portal's connection to its host (what an id thief would present)."""
        return self.envs._hosts[0].link.socket.getsockopt(zmq.ROUTING_ID)

    @property
    def next_seq(self) -> int:
        """The number the portal's next message to its host will carry."""
        return self.envs._hosts[0].link.seq.sent + 1

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                actions = self.rng.integers(0, self.actions, self.num_envs)
                started = time.perf_counter()
                result = self.envs.step(actions)
                self.latencies.append(time.perf_counter() - started)
                assert_same(snapshot(result), self.expected.step(actions), f"honest step {self.steps}")
                self.steps += 1
                if self.pause:
                    time.sleep(self.pause)
        except BaseException as exc:
            self.error = exc

    def p99_ms(self) -> float:
        return float(np.percentile(self.latencies, 99) * 1000) if self.latencies else float("nan")

    def finish(self, more: int = 20, timeout: float = 30.0) -> dict:
        """Wait for ``more`` steps past this call, stop, close; raise what went wrong; the latencies."""
        target = self.steps + more
        eventually(lambda: self.steps >= target or self.error is not None or not self.thread.is_alive(), timeout)
        self.close()
        if self.error is not None:
            raise AssertionError(f"the honest agent failed after {self.steps} good steps: {self.error!r}") from (
                self.error
            )
        assert self.steps >= target, f"the honest agent made {self.steps} steps, {target} were due within {timeout} s"
        report = {
            "steps": self.steps,
            "p99_ms": round(self.p99_ms(), 2),
            "max_ms": round(max(self.latencies) * 1000, 2),
        }
        print(f"honest agent: {report}")
        return report

    def close(self) -> None:
        self._stop.set()
        thread = getattr(self, "thread", None)
        if thread is not None:
            thread.join(30)
        try:
            self.envs.close()
        finally:
            self.expected.close()

    def __enter__(self) -> HonestAgent:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        if not self._stop.is_set():
            try:
                self.close()
            except Exception:
                if exc_info[0] is None:
                    raise
