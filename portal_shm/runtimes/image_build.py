"""Building env images: the local base image (no registry needed) and image directories.

An image directory holds a Dockerfile whose base is the build arg ``BASE_IMAGE``. The build
context is assembled in a temporary directory: the image directory, the wheel of portal-shm's
env side (``_wheels/portal_shm_env-VERSION-py3-none-any.whl``, see ``env_wheel``; Dockerfiles
install it in their build stage with ``pip install --no-index --find-links /tmp/wheels
portal-shm-env``) and the building host's pip settings (``_pip/``: index URLs and CA bundle, for
networks behind a TLS-intercepting proxy). Dockerfiles use ``_pip/`` and ``_wheels/`` only in a
build stage, so the CA bundle never reaches the final image. A Dockerfile that names
``_portal_shm/`` gets the whole package there as source (the agent image, which needs the agent
side too, and Dockerfiles written before the wheel). A Dockerfile that names ``_docker/`` (the
agent image) gets the host's docker CLI there: Debian's docker CLI comes only with the whole
engine, and no registry here has Docker's own image.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Callable, Optional

from ..errors import PortalError
from .docker import LABEL_ENV_IMAGE, LABEL_PREFIX, LABEL_SERVER_DIGEST, docker_client
from .env_wheel import env_wheel, env_wheel_digest

DEFAULT_BASE = "portal-shm/base:bookworm"
BASE_ENV_VAR = "PORTAL_SHM_BASE_IMAGE"
IMAGE_PREFIX = "portal-shm/"
LOCAL_BASE_REPOSITORY = IMAGE_PREFIX + "base"  # what ``portal-shm build base`` makes: portal-shm/base:SUITE
DEBIAN_SUITES = ("buster", "bullseye", "bookworm", "trixie", "sid")
TAIL_LINES = 20  # lines of build output a failed build's error quotes
WHEELS = "_wheels"  # the context's folder of the env side's wheel
SOURCE = "_portal_shm"  # the context's folder of the whole package as source, for Dockerfiles that name it


class ImageBuildError(PortalError):
    """A build failed; the message carries the tail of the build log."""


def builtin_images_dir() -> Optional[Path]:
    """``portal_shm/images/``: the built-in images are package data (a wheel carries them)."""
    path = Path(__file__).resolve().parents[1] / "images"
    return path if path.is_dir() else None


def builtin_images() -> list:
    root = builtin_images_dir()
    return sorted(p.name for p in root.iterdir() if (p / "Dockerfile").is_file()) if root else []


def resolve_image_dir(name_or_dir: str) -> tuple[Path, str]:
    """The directory to build and its default tag (``portal-shm/NAME`` or the directory's name)."""
    path = Path(name_or_dir)
    if path.is_dir():
        if not (path / "Dockerfile").is_file():
            raise PortalError(f"{path} has no Dockerfile; an image directory needs a Dockerfile and an env entry")
        return path.resolve(), path.resolve().name.lower()
    root = builtin_images_dir()
    if root is not None and (root / name_or_dir / "Dockerfile").is_file():
        return root / name_or_dir, IMAGE_PREFIX + name_or_dir
    known = ", ".join(builtin_images()) or "none found (the package's images/ folder is missing: reinstall portal-shm)"
    raise PortalError(f"no image directory {name_or_dir!r}: pass a directory with a Dockerfile or one of: {known}")


def _pip_config() -> dict:
    """The host's pip settings, as pip itself reports them."""
    try:
        out = subprocess.run(
            [sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True, timeout=60
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    settings = {}
    for line in out.splitlines():
        key, _, value = line.partition("=")
        settings[key.split(".", 1)[-1]] = value.strip().strip("'\"")
    return settings


def write_pip_context(target: Path) -> None:
    """Index URLs (http/https only: the host's file:// mirrors do not exist in a build) and the CA bundle."""
    target.mkdir(parents=True)
    settings = _pip_config()
    lines = ["[global]"]
    for key in ("index-url", "extra-index-url", "trusted-host", "timeout", "default-timeout"):
        value = settings.get(key) or os.environ.get("PIP_" + key.upper().replace("-", "_"))
        if value:
            kept = [v for v in value.split() if not v.startswith("file:")] if key.endswith("url") else [value]
            if kept:
                lines.append(f"{key} = {' '.join(kept)}")
    cert = settings.get("cert") or os.environ.get("PIP_CERT") or os.environ.get("SSL_CERT_FILE")
    if cert and os.path.isfile(cert):
        shutil.copyfile(cert, target / "ca.crt")
        lines.append("cert = /tmp/pip/ca.crt")
    (target / "pip.conf").write_text("\n".join(lines) + "\n")


def assemble_context(image_dir: Path, target: Path) -> None:
    shutil.copytree(image_dir, target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    dockerfile = (image_dir / "Dockerfile").read_text()
    env_wheel(target / WHEELS)
    if f"{SOURCE}/" in dockerfile:
        package = Path(__file__).resolve().parents[1]
        shutil.copytree(package, target / SOURCE / "portal_shm", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    write_pip_context(target / "_pip")
    if "_docker/" in dockerfile:
        (target / "_docker").mkdir()
        cli = shutil.which("docker")
        if cli:
            shutil.copy2(cli, target / "_docker" / "docker")


def build_labels(image_dir: Path) -> dict:
    """The env-image label (what hosts serve by default) on every image but an agent's: an image
    whose Dockerfile labels itself ``portal-shm.agent-image`` holds the docker CLI and runs training
    commands, so no host should offer it to agents as an env runtime. Every image carries the
    digest of the env-side wheel in its context (``env_wheel_digest``), so an agent can tell an
    image built from other env-side code."""
    labels = {LABEL_SERVER_DIGEST: env_wheel_digest()}
    if f"{LABEL_PREFIX}.agent-image" not in (image_dir / "Dockerfile").read_text():
        labels[LABEL_ENV_IMAGE] = "1"
    return labels


def default_base(client: object) -> Optional[str]:
    """``$PORTAL_SHM_BASE_IMAGE``, else the local registry-free base if built, else the Dockerfile's."""
    if os.environ.get(BASE_ENV_VAR):
        return os.environ[BASE_ENV_VAR]
    try:
        client.images.get(DEFAULT_BASE)
        return DEFAULT_BASE
    except Exception:
        return None


def base_build_command(base: str) -> str:
    """The command that makes the local base ``base`` (``portal-shm/base:SUITE``, see ``build_base``)."""
    suite = base.partition(":")[2]
    if base == DEFAULT_BASE:
        return "portal-shm build base"
    if base == f"{LOCAL_BASE_REPOSITORY}:{suite}" and suite in DEBIAN_SUITES:
        return f"portal-shm build base --suite {suite}"
    return f"portal-shm build base --suite SUITE -t {base}"


def is_local_base(image: str) -> bool:
    """Whether ``image`` is one that only ``portal-shm build base`` makes (no registry has it)."""
    return image.partition(":")[0] == LOCAL_BASE_REPOSITORY


def check_local_base(client: object, base: str) -> None:
    """Fail at once, naming the command that makes it, when ``base`` is a local base not built yet.

    Docker would otherwise try to pull it from Docker Hub and fail with a registry error that does
    not say the image is made here, by ``portal-shm build base``.
    """
    if not is_local_base(base):
        return
    import docker.errors

    try:
        client.images.get(base)
    except docker.errors.ImageNotFound:
        raise ImageBuildError(
            f"base image {base} is not built on this machine: build a base first: {base_build_command(base)} "
            "(needs root and debootstrap), or pass --base IMAGE of an image you have (docker images)"
        ) from None


def dockerfile_base(image_dir: Path) -> Optional[str]:
    """The Dockerfile's own default base (``ARG BASE_IMAGE=python:3.12-slim``), if it names one."""
    match = re.search(r"^\s*ARG\s+BASE_IMAGE=(\S+)", (image_dir / "Dockerfile").read_text(), re.MULTILINE)
    return match.group(1) if match else None


def _tail(log: list) -> str:
    """The last ``TAIL_LINES`` non-blank lines of output that came in pieces (``log``)."""
    return "\n".join([line for line in "".join(log).splitlines() if line.strip()][-TAIL_LINES:])


def build_image(
    name_or_dir: str,
    tag: Optional[str] = None,
    base: Optional[str] = None,
    on_line: Optional[Callable[[str], None]] = None,
) -> str:
    """Build an image directory; returns the tag. ``base`` overrides the Dockerfile's BASE_IMAGE.

    ``on_line`` gets each line of docker's build output as it comes (``Step 3/9 : RUN ...`` first
    in each step): builds take minutes, so callers show it. A failed build raises
    ``ImageBuildError`` quoting the last lines of that output.
    """
    image_dir, default_tag = resolve_image_dir(name_or_dir)
    tag = tag or default_tag
    client = docker_client()
    base = base or default_base(client)
    if base is not None:
        check_local_base(client, base)
    pulled = base or dockerfile_base(image_dir)
    log: list = []
    step = ""
    with tempfile.TemporaryDirectory(prefix="psm-build-") as tmp:
        context = Path(tmp) / "context"
        assemble_context(image_dir, context)
        stream = client.api.build(
            path=str(context),
            tag=tag,
            buildargs={"BASE_IMAGE": base} if base else None,
            labels=build_labels(image_dir),
            network_mode="host",
            rm=True,
            forcerm=True,
            decode=True,
        )
        for chunk in stream:
            text = chunk.get("stream") or chunk.get("status") or ""
            if "error" in chunk:
                log.append("\n" + chunk["error"])
                message = f"building {tag} from {image_dir} failed"
                if " : FROM " in step and pulled:
                    message += (
                        f" at its FROM step: docker could not get the base {pulled} "
                        "(not on this machine, and no registry gave it). Build a local base first: "
                        "portal-shm build base (needs root and debootstrap), or pass --base IMAGE of an image "
                        "you have (docker images)"
                    )
                raise ImageBuildError(f"{message}; the last lines of the build:\n{_tail(log)}")
            if text:
                log.append(text if "stream" in chunk else text + "\n")  # status lines (pulls) come unended
                for line in text.splitlines():
                    if line.startswith("Step "):
                        step = line
                    if on_line is not None and line.strip():
                        on_line(line.rstrip())
    return tag


def build_base(
    tag: str = DEFAULT_BASE,
    suite: str = "bookworm",
    mirror: str = "http://deb.debian.org/debian",
    on_line: Optional[Callable[[str], None]] = None,
) -> str:
    """A minimal Debian with python3 made by debootstrap and ``docker import``: no registry needed."""
    if shutil.which("debootstrap") is None:
        raise PortalError("building the base image needs debootstrap: apt-get install debootstrap (and root)")
    if os.geteuid() != 0:
        raise PortalError("debootstrap needs root: run portal-shm build base as root (or with sudo)")
    client = docker_client()
    with tempfile.TemporaryDirectory(prefix="psm-rootfs-") as tmp:
        rootfs = Path(tmp) / "rootfs"
        command = [
            "debootstrap",
            "--variant=minbase",
            "--include=python3,python3-venv,python3-pip,ca-certificates",
            suite,
            str(rootfs),
            mirror,
        ]
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        lines: list = []
        for line in process.stdout:
            lines.append(line)
            if on_line is not None:
                on_line(line.rstrip())
        if process.wait() != 0:
            raise ImageBuildError(f"{' '.join(command)} failed; the last lines of its output:\n{_tail(lines)}")
        archive = Path(tmp) / "rootfs.tar"
        if on_line is not None:
            on_line("I: packing the root filesystem")
        subprocess.run(["tar", "-C", str(rootfs), "-cf", str(archive), "."], check=True)
        repository, _, version = tag.partition(":")
        if on_line is not None:
            on_line(f"I: importing it as {tag}")
        client.api.import_image_from_file(str(archive), repository=repository, tag=version or "latest")
        client.images.get(tag)
    return tag
