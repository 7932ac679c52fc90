"""Getting packages into a runtime: uv when the agent has it (seconds), pip otherwise (everywhere);
the env side among them, from its wheel (``env_wheel``).

uv reads no ``pip.conf``, yet a machine's pip configuration is often what makes installs work at
all there (a private index, a CA bundle, local wheels, constraints). So uv runs with pip's
settings translated into uv's environment variables (settings already given to uv win), and an
install that uv fails is retried with pip before a build is declared broken.
``PORTAL_SHM_INSTALLER=pip`` skips uv altogether.
"""

from __future__ import annotations

import ast
import functools
import os
import shutil
import subprocess
import sys
import tempfile
from typing import Optional

from .cache import SERVER_DEPS, Build, RuntimeBuildError
from .env_wheel import env_wheel

INSTALLER_ENV_VAR = "PORTAL_SHM_INSTALLER"


def find_uv() -> Optional[str]:
    """uv on PATH, else the binary of the ``uv`` PyPI package installed beside the agent."""
    if os.environ.get(INSTALLER_ENV_VAR, "").lower() == "pip":
        return None
    found = shutil.which("uv")
    if found:
        return found
    try:
        import uv  # type: ignore[import-not-found]

        return uv.find_uv_bin()
    except (ImportError, FileNotFoundError):
        return None


@functools.lru_cache(maxsize=1)
def pip_settings() -> dict:
    """pip's effective configuration for ``pip install`` (files and PIP_* variables), by key."""
    try:
        listing = subprocess.run(
            [sys.executable, "-m", "pip", "config", "list"],
            capture_output=True,
            text=True,
            timeout=60,
            stdin=subprocess.DEVNULL,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    sections: dict = {}
    for line in listing.splitlines():
        name, sep, raw = line.partition("=")
        section, _, key = name.rpartition(".")
        try:
            sections.setdefault(section, {})[key] = ast.literal_eval(raw) if sep else None
        except (ValueError, SyntaxError):
            continue
    settings: dict = {}
    for section in ("global", "install", ":env:"):  # later ones win, as in pip
        settings.update({k: v for k, v in sections.get(section, {}).items() if v is not None})
    return settings


def uv_environment() -> dict:
    """The agent's environment plus pip's index, find-links, constraint and cert settings for uv."""
    pip = pip_settings()
    env = dict(os.environ)

    def put(name: str, value: Optional[str]) -> None:
        if value and name not in os.environ:
            env[name] = value

    words = lambda key: (pip.get(key) or "").split()  # noqa: E731
    put("UV_INDEX_URL", pip.get("index-url"))
    put("UV_EXTRA_INDEX_URL", " ".join(words("extra-index-url")))
    if words("extra-index-url"):
        put("UV_INDEX_STRATEGY", "unsafe-best-match")  # pip picks the best version over all indexes
    put("UV_FIND_LINKS", ",".join(words("find-links")))
    put("UV_CONSTRAINT", " ".join(words("constraint") + words("constraints")))
    put("UV_INSECURE_HOST", " ".join(words("trusted-host")))
    put("UV_HTTP_TIMEOUT", pip.get("timeout") or pip.get("default-timeout"))
    put("SSL_CERT_FILE", pip.get("cert"))
    if str(pip.get("no-index", "")).lower() in ("1", "true", "yes", "on"):
        put("UV_NO_INDEX", "1")
    return env


def create_venv(build: Build, base_python: str) -> None:
    """A venv with pip in it at ``build.path``: ``uv venv --seed`` (about 1 s), else ``python -m venv``."""
    uv = find_uv()
    if uv:
        build.step("creating the venv with uv")
        try:
            build.run(
                [uv, "venv", "--seed", "--python", base_python, build.path],
                "creating the venv with uv",
                env=uv_environment(),
            )
            return
        except RuntimeBuildError:
            shutil.rmtree(build.path, ignore_errors=True)
    build.step("creating the venv with python -m venv")
    build.run([base_python, "-m", "venv", build.path], "creating the venv")


def _has_pip(python: str) -> bool:
    return subprocess.run([python, "-c", "import pip"], capture_output=True, stdin=subprocess.DEVNULL).returncode == 0


def install(build: Build, python: str, args: list, summary: str) -> str:
    """``pip install args`` into the runtime of ``python`` with uv, or pip; returns which one did it."""
    uv = find_uv()
    uv_error: Optional[RuntimeBuildError] = None
    if uv:
        build.step(f"installing {summary} with uv")
        try:
            build.run(
                [uv, "pip", "install", "--python", python, *args],
                "installing the requirements with uv",
                env=uv_environment(),
            )
            return "uv"
        except RuntimeBuildError as exc:
            uv_error = exc
            if not _has_pip(python):
                raise
    build.step(f"installing {summary} with pip" + (" (uv failed)" if uv_error else ""))
    try:
        build.run([python, "-m", "pip", "install", "--no-input", *args], "installing the requirements with pip")
    except RuntimeBuildError as exc:
        if uv_error is None:
            raise
        raise RuntimeBuildError(f"{exc}\n\n(uv had failed first: {uv_error})") from None
    return "pip"


def install_env_side(build: Build, python: str, requirements: list, summary: str) -> dict:
    """``requirements``, the env server's dependencies and the env side's wheel (``env_wheel``) in
    one install, then a check that ``portal_shm.server`` imports; returns the facts for the marker.

    The env side comes from its distribution, ``portal-shm-env``, as a release installs it, made
    from the agent's own files into a temporary folder: no build step, nothing written into the
    agent's source tree, the same from a checkout and from an installed portal-shm. One resolve
    with the requirements, so theirs decide the versions of numpy, pyzmq and msgpack within the
    wheel's floors. The check runs in the runtime's own directory so that no ``portal_shm`` in the
    caller's working directory can stand in for the installed one.
    """
    with tempfile.TemporaryDirectory(prefix="psm-env-wheel-") as folder:
        wheel = env_wheel(folder)
        installer = install(build, python, [*requirements, *SERVER_DEPS, str(wheel)], summary)
    build.run(
        [python, "-c", "import portal_shm.server"],
        "checking that the env server imports in the runtime",
        cwd=build.path,
    )
    return {"installer": installer, "env_wheel": wheel.name}
