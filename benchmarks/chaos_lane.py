"""One portal of a chaos soak ("lane"), stepped in a thread of its own with seeded random actions;
every env's every transition is checked against its reference replay.

The chaos driver never touches a lane's portal: it asks the lane to signal one of its servers
(done between two of the lane's steps, so that ``envs.servers`` is read by the thread that steps),
or it registers a fault it caused itself (a host killed, the link cut). A portal is not
thread-safe, and a fault must not be what breaks it.
"""

from __future__ import annotations

import re
import signal
import threading
import time
from typing import Any, Callable, Optional

import gymnasium as gym
import numpy as np
from chaos_faults import SIGSTOP, Fault, resume_later, signal_server
from chaos_leftovers import start_time
from chaos_reference import LOST, RESTARTED, EnvReplay


def server_pid(server: dict) -> Optional[int]:
    """The host pid of an env server (a remote host's are named in its runtime text)."""
    if server.get("pid"):
        return int(server["pid"])
    found = re.search(r"\bpid (\d+)", server.get("runtime", ""))
    return int(found.group(1)) if found else None


class Lane:
    """A portal, its env replays, the faults injected into it and what was checked."""

    def __init__(
        self,
        name: str,
        envs: Any,
        make_env: Callable[[], gym.Env],
        seed: int,
        takes: tuple,
        step_timeout: float,
    ) -> None:
        self.name, self.envs, self.seed, self.takes = name, envs, seed, takes
        self.step_timeout = step_timeout
        self.num_envs = envs.num_envs
        self.replays = [EnvReplay(make_env, seed + i) for i in range(self.num_envs)]
        self.rng = np.random.default_rng(seed)
        self.steps = 0
        self.checked = 0
        self.lost = 0
        self.restarts = [0] * self.num_envs
        self.recycles = [0] * self.num_envs
        self.error: Optional[str] = None
        self.open: list = []
        self.done: list = []
        self.seen_pids: set = set()  # (pid, start time) of every server seen: none may outlive the run
        self._requests: list = []
        self._stopped: set = set()  # SIGSTOPped pids, resumed at close so nothing stays frozen
        self._timers: list = []
        self._lock = threading.Lock()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name=f"chaos-{name}", daemon=True)

    @property
    def alive(self) -> bool:
        return self.thread.is_alive() and self.error is None

    def request(self, kind: str, pick: int, mid_step: bool, resume: bool) -> None:
        """Signal server ``pick % servers`` before the next step (``kind``: sigkill or sigstop)."""
        with self._lock:
            self._requests.append((kind, pick, mid_step, resume))

    def add_fault(self, fault: Fault) -> None:
        with self._lock:
            self.open.append(fault)

    def _run(self) -> None:
        try:
            obs, infos = self.envs.reset(seed=self.seed)
            self._note_pids()
            none = np.zeros(self.num_envs, bool)
            restarted = infos.get("_env_restarted", none)  # a reset repeated on a fresh server shows it
            for i, replay in enumerate(self.replays):
                self._count(i, replay.check_reset(obs[i], bool(restarted[i])))
                self.restarts[i] += bool(restarted[i])
            while not self.stop.is_set():
                timer = self._inject()
                actions = self.rng.integers(0, self.envs.single_action_space.n, self.num_envs)
                began = time.monotonic()
                obs, reward, terminated, truncated, infos = self.envs.step(actions)
                ended = time.monotonic()
                if timer is not None:
                    timer.join()
                self.steps += 1
                restarted = infos.get("_env_restarted", none)
                recycled = infos.get("_env_recycled", none)
                for i, replay in enumerate(self.replays):
                    verdict = replay.check(
                        actions[i],
                        obs[i],
                        float(reward[i]),
                        bool(terminated[i]),
                        bool(truncated[i]),
                        bool(restarted[i]),
                    )
                    self._count(i, verdict)
                    self.recycles[i] += bool(recycled[i])
                    self._observe(i, verdict != LOST and not restarted[i], bool(restarted[i]), began, ended)
                if restarted.any() or recycled.any():
                    self._note_pids()
        except Exception as exc:  # reported: a fault that breaks a portal is the finding
            self.error = f"{type(exc).__name__}: {exc}"

    def _inject(self) -> Optional[threading.Timer]:
        with self._lock:
            if not self._requests:
                return None
            kind, pick, mid_step, resume = self._requests.pop(0)
        server = self.envs.servers[pick % len(self.envs.servers)]
        pid = server_pid(server)
        if pid is None:
            return None
        detail = f"server {server['server']} pid {pid}" + (" mid-step" if mid_step else "")
        sig = signal.SIGSTOP if kind == SIGSTOP else signal.SIGKILL
        if kind == SIGSTOP:
            self._stopped.add(pid)
            if resume:  # after the portal gave up on it; otherwise the restart kills it stopped
                self._timers.append(resume_later(pid, self.step_timeout + 1.0))
                detail += ", SIGCONT later"
        self.add_fault(Fault(kind, self.name, tuple(server["envs"]), time.monotonic(), detail))
        return signal_server(pid, sig, mid_step)

    def _count(self, i: int, verdict: str) -> None:
        self.checked += 1
        self.lost += verdict == LOST
        self.restarts[i] += verdict == RESTARTED

    def _observe(self, i: int, good: bool, restarted: bool, began: float, ended: float) -> None:
        with self._lock:
            for fault in list(self.open):
                if fault.observe(i, good, restarted, began, ended):
                    self.open.remove(fault)
                    self.done.append(fault)

    def _note_pids(self) -> None:
        self.seen_pids.update((pid, start_time(pid)) for pid in map(server_pid, self.envs.servers) if pid)

    def counter_mismatches(self) -> list:
        """The portal's own restart and recycle counts against those seen in the infos; for restarts,
        what the portal logged of each env that differs (phase, cause, where its infos showed it)."""
        out = []
        counted = getattr(self.envs, "restarts", None)
        if counted is not None and list(counted) != self.restarts:
            out.append(f"restarts: portal {list(counted)}, infos {self.restarts}")
            differ = {i for i, (a, b) in enumerate(zip(counted, self.restarts)) if a != b}
            for record in getattr(self.envs, "restart_log", []):
                if differ & set(record["envs"]):
                    out.append(
                        f"  envs {record['envs']}: restart in {record['phase']} "
                        f"({'counted' if record['counted'] else 'not counted'}, "
                        f"{'shown in ' + record['shown'] if record['shown'] else 'never shown in the infos'}, "
                        f"{record['attempts']} fresh server(s)): {record['cause']}"
                    )
        counted = getattr(self.envs, "recycles", None)
        if counted is not None and list(counted) != self.recycles:
            out.append(f"recycles: portal {list(counted)}, infos {self.recycles}")
        return out

    def close(self) -> None:
        for timer in self._timers:
            timer.cancel()
        for pid in self._stopped:
            signal_server(pid, signal.SIGCONT, mid_step=False)
        try:
            self.envs.close()
        finally:
            for replay in self.replays:
                replay.close()

    def summary(self) -> dict:
        return {
            "lane": self.name,
            "takes": list(self.takes),
            "num_envs": self.num_envs,
            "steps": self.steps,
            "transitions_checked": self.checked,
            "lost": self.lost,
            "restarts": sum(self.restarts),
            "recycles": sum(self.recycles),
            "unresolved_faults": [f"{f.kind} {f.detail}" for f in self.open],
            "counter_mismatches": self.counter_mismatches() if self.error is None else [],
            "first_mismatches": {i: r.first_mismatch for i, r in enumerate(self.replays) if r.first_mismatch},
            "error": self.error,
        }
