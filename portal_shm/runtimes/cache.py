"""Isolated runtimes (venvs, conda prefixes) built once and cached by content hash.

Building a runtime takes seconds to minutes and reusing one takes nothing, so each lives in
``<cache>/venvs/<hash>`` (or ``micromamba/``) (``<cache>`` is ``cache_dir``, else ``$PORTAL_SHM_CACHE``, else
``~/.cache/portal-shm``), the hash covering everything that decides its contents. A runtime is
built in place under an exclusive lock per hash, and is usable only once its marker file exists,
which is written last: several agents asking for the same runtime at once build it once, and a
build that fails (or is interrupted) is removed, so the cache never holds a half-built runtime.

In place rather than in a temporary directory renamed at the end, because venvs and conda
prefixes hard-code their own path (script shebangs, ``pyvenv.cfg``, activation scripts, conda's
prefix replacement in binaries): a renamed one is broken. The marker gives the same guarantee.
"""

from __future__ import annotations

import fcntl
import functools
import hashlib
import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from contextlib import contextmanager
from typing import Any, Callable, Iterator, Optional

from ..errors import PortalError
from ..version import __version__
from .backend import ServerHandle, describe_returncode

MARKER = "portal-shm-runtime.json"
BUILD_LOG = "portal-shm-build.log"
ALL = "all"
FOLDERS = {"venv": "venvs", "micromamba": "micromamba"}  # kind -> folder of the cache root
# What the env server imports besides the standard library, installed with the env side's wheel
# (``env_wheel``) and named here without version pins, so that the runtime's own requirements
# (``numpy<2``) decide.
SERVER_DEPS = ("numpy", "pyzmq", "msgpack")


class RuntimeBuildError(PortalError):
    """Building an isolated runtime failed; the message names the command and ends with its output."""


def cache_root(cache_dir: Optional[str] = None) -> str:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    root = cache_dir or os.environ.get("PORTAL_SHM_CACHE") or os.path.join(base, "portal-shm")
    return os.path.abspath(os.path.expanduser(root))


def file_digest(path: str, what: str) -> str:
    try:
        with open(path, "rb") as handle:
            return hashlib.sha256(handle.read()).hexdigest()
    except OSError as exc:
        raise PortalError(f"cannot read the {what} {path!r}: {exc.strerror}") from None


def content_hash(parts: dict) -> str:
    """16 hex digits of sha256 over the JSON of ``parts``: short enough to type, long enough not to collide."""
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:16]


class Build:
    """One runtime being built: where, its log, and the progress line the user sees."""

    def __init__(self, kind: str, digest: str, path: str, log_path: str, status: Any) -> None:
        self.kind, self.digest, self.path, self.log_path, self.status = kind, digest, path, log_path, status

    def step(self, text: str) -> None:
        self.status.update(f"building {self.kind} {self.digest}: {text}")

    def run(self, cmd: list, what: str, env: Optional[dict] = None, cwd: Optional[str] = None) -> None:
        """Run one build command, its output going to the build log; raise RuntimeBuildError on failure."""
        with open(self.log_path, "ab") as log:
            log.write(f"\n$ {shlex.join(cmd)}\n".encode())
            log.flush()
            start = log.tell()
            try:
                code = subprocess.call(
                    cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=cwd
                )
            except OSError as exc:
                raise RuntimeBuildError(f"{what} failed: cannot run `{shlex.join(cmd)}`: {exc}") from None
        if code != 0:
            with open(self.log_path, "rb") as log:
                log.seek(start)
                tail = "\n".join(log.read().decode("utf-8", "replace").splitlines()[-40:])
            raise RuntimeBuildError(
                f"{what} failed: `{shlex.join(cmd)}` ended with {describe_returncode(code)}"
                f"\n\n--- last lines of its output ---\n{tail.rstrip()}"
            )


@contextmanager
def _locked(lock_path: str, waiting: str) -> Iterator[None]:
    os.makedirs(os.path.dirname(lock_path), exist_ok=True)
    fd = os.open(lock_path, os.O_CREAT | os.O_RDWR, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            from rich.console import Console

            with Console(stderr=True).status(waiting):
                fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the flock; lock files stay, unlinking them would race


def _lock_path(root: str, kind: str, digest: str) -> str:
    return os.path.join(root, ".locks", f"{kind}-{digest}.lock")


def ensure_runtime(
    kind: str, digest: str, describe: dict, build: Callable[[Build], dict], cache_dir: Optional[str] = None
) -> str:
    """The path of runtime ``kind/digest``, built by ``build`` (which must create ``Build.path``) if absent.

    ``build`` returns extra facts for the marker (e.g. the installer used). Cache hits cost one
    ``stat`` and print nothing; a build shows a spinner naming its step on stderr.
    """
    root = cache_root(cache_dir)
    path = os.path.join(root, FOLDERS[kind], digest)
    if os.path.exists(os.path.join(path, MARKER)):
        return path
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
    except OSError as exc:
        raise PortalError(
            f"cannot use the runtime cache {root}: {exc.strerror}; "
            "point $PORTAL_SHM_CACHE or cache_dir= at a writable folder"
        ) from None
    with _locked(_lock_path(root, kind, digest), f"waiting for another process building {kind} {digest}"):
        if os.path.exists(os.path.join(path, MARKER)):
            return path
        shutil.rmtree(path, ignore_errors=True)  # an unfinished build (a crash) is never reused
        log_path = os.path.join(root, FOLDERS[kind], f".{digest}.build.log")
        started = time.time()
        from rich.console import Console

        console = Console(stderr=True)
        try:
            with console.status(f"building {kind} {digest}") as status:
                extra = build(Build(kind, digest, path, log_path, status))
            shutil.move(log_path, os.path.join(path, BUILD_LOG))
            marker = {
                **describe,
                **extra,
                "kind": kind,
                "hash": digest,
                "created": started,
                "build_seconds": round(time.time() - started, 2),
                "portal_shm": __version__,
            }
            with open(os.path.join(path, MARKER + ".tmp"), "w") as handle:
                json.dump(marker, handle, indent=1)
            os.replace(os.path.join(path, MARKER + ".tmp"), os.path.join(path, MARKER))
        except RuntimeBuildError as exc:
            shutil.rmtree(path, ignore_errors=True)
            raise RuntimeBuildError(f"building {kind} {digest} failed, nothing was cached: {exc}") from None
        except BaseException:
            shutil.rmtree(path, ignore_errors=True)
            raise
        finally:
            if os.path.exists(log_path):
                os.unlink(log_path)
        console.print(f"[bold]{kind} {digest}[/] built in {time.time() - started:.1f} s: {path}", highlight=False)
    return path


def _size(path: str) -> int:
    total = 0
    for folder, _, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(folder, name)).st_size
            except OSError:
                pass
    return total


def list_runtimes(kind: Optional[str] = None, cache_dir: Optional[str] = None) -> list[dict]:
    """Cached runtimes (of ``kind``, or all), oldest first; unfinished ones have ``complete=False``."""
    root = cache_root(cache_dir)
    found = []
    for each in [kind] if kind else sorted(FOLDERS):
        folder = os.path.join(root, FOLDERS[each])
        if not os.path.isdir(folder):
            continue
        for digest in sorted(os.listdir(folder)):
            path = os.path.join(folder, digest)
            if digest.startswith(".") or not os.path.isdir(path):
                continue
            try:
                with open(os.path.join(path, MARKER)) as handle:
                    info = {**json.load(handle), "complete": True}
            except (OSError, ValueError):
                try:
                    info = {"complete": False, "created": os.stat(path).st_mtime}
                except OSError:
                    continue  # removed meanwhile
            info.update(kind=each, hash=digest, path=path, size=_size(path))
            info.setdefault("requirements", [])
            found.append(info)
    return sorted(found, key=lambda info: info["created"])


def remove_runtimes(which: str, kind: Optional[str] = None, cache_dir: Optional[str] = None) -> list[dict]:
    """Remove the runtime whose hash starts with ``which``, or every one for ``which == "all"``.

    A runtime being built is skipped by ``"all"`` and refused by name. A runtime that running env
    servers use should not be removed: their later imports would fail.
    """
    runtimes = list_runtimes(kind, cache_dir)
    if which != ALL:
        runtimes = [info for info in runtimes if info["hash"].startswith(which)]
        if len(runtimes) != 1:
            problem = "no cached runtime" if not runtimes else f"{len(runtimes)} cached runtimes"
            raise PortalError(
                f"{problem} with a hash starting {which!r} in {cache_root(cache_dir)}; `portal-shm env ls` lists them"
            )
    removed = []
    root = cache_root(cache_dir)
    os.makedirs(os.path.join(root, ".locks"), exist_ok=True)
    for info in runtimes:
        fd = os.open(_lock_path(root, info["kind"], info["hash"]), os.O_CREAT | os.O_RDWR, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            if which != ALL:
                raise PortalError(
                    f"{info['kind']} {info['hash']} is being built by another process; remove it once that is done"
                ) from None
            continue
        try:
            shutil.rmtree(info["path"], ignore_errors=True)
            removed.append(info)
        finally:
            os.close(fd)
    return removed


class RuntimeHandle(ServerHandle):
    """A server started by the process backend inside a cached runtime, described as such."""

    def __init__(self, inner: ServerHandle, label: str) -> None:
        self.inner, self.label = inner, label

    def exit_status(self) -> Optional[str]:
        return self.inner.exit_status()

    def log_tail(self, lines: int = 30) -> str:
        return self.inner.log_tail(lines)

    def stop(self, timeout: float) -> None:
        self.inner.stop(timeout)

    def describe(self) -> str:
        return f"{self.label}, {self.inner.describe()}"

    def host_pid(self) -> Optional[int]:
        return self.inner.host_pid()


@functools.lru_cache(maxsize=None)
def python_version(python: str) -> str:
    """``sys.version`` of another interpreter (part of a runtime's hash)."""
    if python == sys.executable:
        return sys.version
    try:
        return subprocess.run(
            [python, "-c", "import sys; print(sys.version)"], capture_output=True, text=True, check=True, timeout=60
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError) as exc:
        raise PortalError(f"cannot run the base interpreter {python!r}: {exc}") from None
