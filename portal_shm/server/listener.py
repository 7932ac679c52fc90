"""Long-running env servers that agents attach to by address (``portal-shm start``).

A listener binds a ZeroMQ REP socket at a known address and, for every agent that asks, starts a
worker: the same command line it was started with, minus ``--listen``, handed the agent's config
as a private file in the agent's run directory (``wire/launch.py``), so each agent session gets
fresh envs in a fresh process. Agents poll a worker's status through the listener, which is how
they notice a worker that died. Runs on the env side: standard library, pyzmq and msgpack only.
"""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys
from typing import Optional

import zmq

from ..wire.launch import CONFIG_ENV_VAR, read_tail, remove_config, write_config
from ..wire.protocol import PROTOCOL_VERSION, packb, unpackb


def worker_command(argv: list) -> list:
    """The listener's own command line without ``--listen ADDRESS``."""
    command, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg == "--listen":
            skip = True
        elif not arg.startswith("--listen="):
            command.append(arg)
    return command


def listen(address: str, command: Optional[list] = None) -> None:
    """Serve start/status/stop requests at ``address`` until SIGTERM."""
    command = command or [sys.executable, "-m", "portal_shm.server"]
    context = zmq.Context()
    socket = context.socket(zmq.REP)
    socket.bind(address)
    if address.startswith("ipc://"):
        os.chmod(address[len("ipc://") :], 0o600)
    workers: dict = {}
    counter = itertools.count()
    running = [True]
    signal.signal(signal.SIGTERM, lambda *_: running.__setitem__(0, False))
    print(f"portal-shm listener at {address}", flush=True)
    try:
        while running[0]:
            if not socket.poll(500):
                for worker in workers.values():
                    worker[0].poll()
                continue
            try:
                request = unpackb(socket.recv())
                reply = _handle(request, workers, counter, command)
            except Exception as exc:
                reply = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
            socket.send(packb(reply))
    finally:
        for process, _ in workers.values():
            if process.poll() is None:
                process.terminate()
        socket.close(0)
        context.term()


def _handle(request: dict, workers: dict, counter, command: list) -> dict:
    cmd = request.get("cmd")
    if cmd == "start":
        config = request["config"]
        worker_id = f"w{next(counter)}"
        log_path = os.path.join(config["run_dir"], f"worker-{config['server_index']}.log")
        env = dict(os.environ)
        env[CONFIG_ENV_VAR] = write_config(packb(config), config["run_dir"])
        try:
            with open(log_path, "ab") as log:
                process = subprocess.Popen(
                    command,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
        except BaseException:
            remove_config(env[CONFIG_ENV_VAR])
            raise
        workers[worker_id] = (process, log_path)
        return {"ok": True, "worker": worker_id, "pid": process.pid}
    if cmd in ("status", "stop"):
        worker = workers.get(request.get("worker"))
        if worker is None:
            return {"ok": True, "exit": "unknown worker (the listener restarted?)", "log": ""}
        process, log_path = worker
        if cmd == "stop" and process.poll() is None:
            process.terminate()
            try:
                process.wait(request.get("timeout", 2))
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        code = process.poll()
        if code is not None and cmd == "stop":
            workers.pop(request["worker"], None)
        return {"ok": True, "exit": code, "log": read_tail(log_path, 30) if code is not None else ""}
    if cmd == "ping":
        return {"ok": True, "workers": len(workers), "protocol": PROTOCOL_VERSION}
    return {"ok": False, "error": f"unknown request {cmd!r}"}
