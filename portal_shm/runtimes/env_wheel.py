"""The env side as a distribution of its own: the wheel of ``portal-shm-env``, made from this package.

What runs inside env runtimes (``portal_shm.wire``, ``.server``, the presets, the example envs and
the lazy package root) is installed there from this wheel: venvs and micromamba envs get it with
their requirements, images in their build stage. The release ships the same wheel
(``scripts/release.sh`` calls ``env_wheel``).

Made here rather than by a build backend: the env side is plain Python files, so a wheel is a zip
of them with three files of metadata, and making it needs nothing the agent lacks, works the same
from a checkout and from an installed portal-shm, and never writes into the source tree. It is
deterministic (sorted entries, fixed timestamps and permissions): the same files give the same
bytes, and ``env_wheel_digest`` names its contents, which is what runtime caches and image labels
record to tell a runtime built from other env-side code.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import os
import tempfile
import zipfile
from pathlib import Path
from typing import Union

from ..version import __version__

DIST_NAME = "portal-shm-env"
# The env side: the package root (lazy: it loads only its version), the entry-point name of the
# presets, the two folders the import contract confines the env side to, and the example envs
# (``portal_shm.server.example_envs:*`` re-exports them; the server never imports them).
ENV_SIDE = ("__init__.py", "version.py", "presets.py", "wire", "server", "example_envs")
REQUIRES_PYTHON = ">=3.9"
# What the env server imports besides the standard library, at the floors it is tested with
# (pyproject's ``server`` extra); the presets and the example envs need gymnasium too, which an
# env runtime brings with its envs.
REQUIRES = ("numpy>=1.19", "pyzmq>=22", "msgpack>=1.0")
SUMMARY = "The env side of portal-shm: the env server, its wire format and presets, run inside env runtimes"
DESCRIPTION = """\
# portal-shm-env

The env side of portal-shm: `portal_shm.server` (the env server), `portal_shm.wire` (the
shared-memory ring and the messages beside it), `portal_shm.presets` and the example envs. It is
what venvs, conda envs, container images, remote hosts and Ray nodes need to host envs for a
portal-shm agent. The env server needs Python 3.9+, numpy 1.19+, pyzmq and msgpack, none of the
agent's other dependencies (gymnasium, rich, docker); the presets and the example envs need
gymnasium, which a runtime brings with its envs.

Install the same version as the agent's portal-shm. `python -m portal_shm.server` is the server.
"""
TAG = "py3-none-any"
ZIP_TIME = (1980, 1, 1, 0, 0, 0)  # the earliest a zip can hold: no build time in the bytes

PACKAGE = Path(__file__).resolve().parents[1]


def server_modules() -> dict[str, str]:
    """Path relative to the package -> path on disk of every file of the env side.

    Whole folders, subfolders included (``server/multi_agent``), rather than a list of modules:
    import-linter (pyproject.toml) keeps the env side from importing anything outside them, so what
    is here is all it can need.
    """
    found: dict[str, str] = {}
    for entry in ENV_SIDE:
        path = PACKAGE / entry
        if path.is_file():
            found[entry] = str(path)
            continue
        for folder, subfolders, names in os.walk(path):
            subfolders[:] = sorted(d for d in subfolders if d != "__pycache__")
            relative = Path(folder).relative_to(PACKAGE).as_posix()
            for name in names:
                if name.endswith(".py"):
                    found[f"{relative}/{name}"] = os.path.join(folder, name)
    return dict(sorted(found.items()))


def wheel_filename() -> str:
    return f"{DIST_NAME.replace('-', '_')}-{__version__}-{TAG}.whl"


def _dist_info() -> str:
    return f"{DIST_NAME.replace('-', '_')}-{__version__}.dist-info"


def metadata() -> str:
    """The wheel's ``METADATA`` (core metadata 2.1)."""
    headers = [
        ("Metadata-Version", "2.1"),
        ("Name", DIST_NAME),
        ("Version", __version__),
        ("Summary", SUMMARY),
        ("License", "MIT"),
        ("Classifier", "License :: OSI Approved :: MIT License"),
        ("Classifier", "Programming Language :: Python :: 3"),
        ("Requires-Python", REQUIRES_PYTHON),
        *(("Requires-Dist", requirement) for requirement in REQUIRES),
        ("Description-Content-Type", "text/markdown"),
    ]
    return "".join(f"{key}: {value}\n" for key, value in headers) + "\n" + DESCRIPTION


def _wheel_file() -> str:
    return f"Wheel-Version: 1.0\nGenerator: portal-shm ({__name__})\nRoot-Is-Purelib: true\nTag: {TAG}\n"


def _entries() -> list[tuple[str, bytes]]:
    """(path in the wheel, contents) of every file but ``RECORD``, in the wheel's order: the
    package's files sorted, then the metadata (``RECORD`` comes last)."""
    entries = []
    for name, path in server_modules().items():
        with open(path, "rb") as handle:
            entries.append((f"portal_shm/{name}", handle.read()))
    info = _dist_info()
    entries += [(f"{info}/METADATA", metadata().encode()), (f"{info}/WHEEL", _wheel_file().encode())]
    return entries


def env_wheel_digest() -> str:
    """sha256 (hex) over the wheel's contents, names included: it changes with any file of the env
    side, the version or the metadata, and decides the wheel's bytes (what runtimes and images record)."""
    digest = hashlib.sha256()
    for name, data in _entries():
        digest.update(name.encode() + b"\0" + hashlib.sha256(data).digest())
    return digest.hexdigest()


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def wheel_bytes() -> bytes:
    """The wheel of the env side, in memory: a deterministic zip of ``_entries`` and its ``RECORD``."""
    entries = _entries()
    record = io.StringIO()
    writer = csv.writer(record, lineterminator="\n")
    for name, data in entries:
        writer.writerow([name, _record_hash(data), len(data)])
    record_name = f"{_dist_info()}/RECORD"
    writer.writerow([record_name, "", ""])
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in [*entries, (record_name, record.getvalue().encode())]:
            info = zipfile.ZipInfo(name, date_time=ZIP_TIME)
            info.create_system = 3  # unix, wherever it is made: the permissions below mean the same
            info.external_attr = 0o100644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, data)
    return buffer.getvalue()


def env_wheel(dest_dir: Union[str, os.PathLike[str]]) -> Path:
    """Write ``portal_shm_env-<version>-py3-none-any.whl`` into ``dest_dir`` (made if missing) and
    return its path.

    Made from the files of the imported ``portal_shm`` package, a checkout's or an installed one's.
    The same files give a byte-identical wheel; an existing file of that name is replaced
    atomically (a reader never sees half a wheel).
    """
    folder = Path(dest_dir)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / wheel_filename()
    data = wheel_bytes()
    fd, temporary = tempfile.mkstemp(prefix=".portal_shm_env-", suffix=".part", dir=folder)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.chmod(temporary, 0o644)
        os.replace(temporary, path)
    except BaseException:
        if os.path.exists(temporary):
            os.unlink(temporary)
        raise
    return path.resolve()
