"""Env hosts for the remote tests: real ``portal-shm host`` processes on 127.0.0.1, with keys."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Optional

from portal_shm.remote.keys import create_key_pair


@dataclass
class Keys:
    """An agent key pair the host accepts, a second one it does not, and the host's key directory."""

    root: str
    host_dir: str = field(init=False)
    clients_dir: str = field(init=False)
    agent: str = field(init=False)
    stranger: str = field(init=False)

    def __post_init__(self) -> None:
        self.host_dir = os.path.join(self.root, "host")
        self.clients_dir = os.path.join(self.host_dir, "clients")
        public, self.agent = create_key_pair(os.path.join(self.root, "agent"), "agent")
        _, self.stranger = create_key_pair(os.path.join(self.root, "agent"), "stranger")
        os.makedirs(self.clients_dir, mode=0o700)
        shutil.copy(public, self.clients_dir)

    @property
    def host_key(self) -> str:
        return os.path.join(self.host_dir, "host.key")

    def options(self) -> dict:
        return {"host_key": self.host_key, "client_key": self.agent}


class HostProcess:
    """``python -m portal_shm host`` on a free loopback port; its log is kept for the assertions."""

    def __init__(self, keys: Optional[Keys], *args: str, port: int = 0) -> None:
        command = [sys.executable, "-m", "portal_shm", "host", "--bind", f"tcp://127.0.0.1:{port}", *args]
        if keys is None:
            command.append("--insecure")
        else:
            command += ["--keys", keys.host_dir, "--clients", keys.clients_dir]
        self.process = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
        )
        self.lines: list = []
        self.address = ""
        ready = threading.Event()

        def read() -> None:
            for line in self.process.stdout:
                self.lines.append(line)
                found = re.search(r" at (tcp://127\.0\.0\.1:\d+)", line)
                if found and not self.address:
                    self.address = found.group(1)
                    ready.set()
            ready.set()

        threading.Thread(target=read, daemon=True).start()
        if not ready.wait(30) or not self.address:
            self.stop()
            raise RuntimeError("portal-shm host did not start:\n" + "".join(self.lines))

    @property
    def log(self) -> str:
        return "".join(self.lines)

    def wait_for_log(self, text: str, seconds: float) -> bool:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if text in self.log:
                return True
            time.sleep(0.05)
        return False

    def kill(self) -> None:
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.kill()
