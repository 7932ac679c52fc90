"""The env side's wheel (``portal-shm-env``), made by ``env_wheel`` without a build backend: a valid
wheel whose metadata and RECORD check out, the same bytes from the same files, another digest from
other files, and installable into a fresh venv where the env server imports without the agent's
dependencies. The runtimes install it: venv hashes and image labels follow its digest, image build
contexts carry it instead of source."""

import base64
import csv
import email
import hashlib
import importlib.util
import io
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from portal_shm.runtimes import env_wheel as env_wheel_module
from portal_shm.runtimes import image_build
from portal_shm.runtimes import venv as venv_module
from portal_shm.runtimes.env_wheel import (
    ENV_SIDE,
    REQUIRES,
    env_wheel,
    env_wheel_digest,
    server_modules,
    wheel_filename,
)
from portal_shm.runtimes.image_build import assemble_context, builtin_images, builtin_images_dir
from portal_shm.version import __version__

DIST_INFO = f"portal_shm_env-{__version__}.dist-info"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    return env_wheel(tmp_path_factory.mktemp("wheel"))


def _metadata(wheel: Path) -> email.message.Message:
    with zipfile.ZipFile(wheel) as archive:
        return email.message_from_bytes(archive.read(f"{DIST_INFO}/METADATA"))


def test_the_wheel_is_a_valid_zip_named_as_a_pure_python_wheel(wheel):
    assert wheel.name == wheel_filename() == f"portal_shm_env-{__version__}-py3-none-any.whl"
    with zipfile.ZipFile(wheel) as archive:
        assert archive.testzip() is None
        names = archive.namelist()
        wheel_file = archive.read(f"{DIST_INFO}/WHEEL").decode()
    assert names[-1] == f"{DIST_INFO}/RECORD"  # last, as the wheel spec recommends
    assert {f"{DIST_INFO}/METADATA", f"{DIST_INFO}/WHEEL"} <= set(names)
    assert len(names) == len(set(names))
    assert all(name.startswith(("portal_shm/", f"{DIST_INFO}/")) for name in names)
    assert "Wheel-Version: 1.0\n" in wheel_file and "Root-Is-Purelib: true\n" in wheel_file
    assert "Tag: py3-none-any\n" in wheel_file


def test_the_metadata_names_the_distribution_its_version_and_the_env_servers_requirements(wheel):
    metadata = _metadata(wheel)
    assert metadata["Metadata-Version"] == "2.1"
    assert metadata["Name"] == "portal-shm-env"
    assert metadata["Version"] == __version__
    assert metadata["Requires-Python"] == ">=3.9"
    assert metadata.get_all("Requires-Dist") == ["numpy>=1.19", "pyzmq>=22", "msgpack>=1.0"] == list(REQUIRES)
    assert metadata["Summary"] and "\n" not in metadata["Summary"]
    assert metadata["Description-Content-Type"] == "text/markdown" and "portal_shm.server" in metadata.get_payload()


def test_the_record_lists_every_file_once_with_its_sha256_and_size(wheel):
    with zipfile.ZipFile(wheel) as archive:
        rows = list(csv.reader(io.StringIO(archive.read(f"{DIST_INFO}/RECORD").decode())))
        assert sorted(row[0] for row in rows) == sorted(archive.namelist())
        for name, digest, size in rows:
            if name == f"{DIST_INFO}/RECORD":
                assert digest == size == ""
                continue
            data = archive.read(name)
            algorithm, _, encoded = digest.partition("=")
            assert algorithm == "sha256" and "=" not in encoded  # urlsafe base64, unpadded (PEP 376/427)
            assert base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4)) == hashlib.sha256(data).digest()
            assert int(size) == len(data)


def test_the_wheel_holds_exactly_the_env_side_files_of_the_package(wheel):
    with zipfile.ZipFile(wheel) as archive:
        packaged = {
            name[len("portal_shm/") :]: archive.read(name) for name in archive.namelist() if "dist-info" not in name
        }
    assert packaged == {name: Path(path).read_bytes() for name, path in server_modules().items()}
    assert {"__init__.py", "version.py", "presets.py", "server/__main__.py", "wire/ring.py"} <= set(packaged)
    assert {name.split("/")[0] for name in packaged} == set(ENV_SIDE)
    assert not any(name.startswith(("agent/", "runtimes/", "cli/", "images/")) for name in packaged)


def test_the_same_files_give_the_same_bytes(wheel, tmp_path):
    again = env_wheel(tmp_path / "again")
    assert again.read_bytes() == wheel.read_bytes()
    assert env_wheel(tmp_path / "again").read_bytes() == wheel.read_bytes()  # rewritten in place, unchanged
    assert [p.name for p in (tmp_path / "again").iterdir()] == [wheel.name]  # no temporary file left
    with zipfile.ZipFile(again) as archive:
        assert {info.date_time for info in archive.infolist()} == {(1980, 1, 1, 0, 0, 0)}
        assert {info.external_attr >> 16 for info in archive.infolist()} == {0o100644}


def test_other_env_side_code_gives_another_digest_and_another_wheel(wheel, tmp_path, monkeypatch):
    copy = tmp_path / "portal_shm"
    for name, path in server_modules().items():
        (copy / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, copy / name)
    digest = env_wheel_digest()
    monkeypatch.setattr(env_wheel_module, "PACKAGE", copy)
    assert env_wheel_digest() == digest  # the same files elsewhere: the same wheel
    assert env_wheel(tmp_path / "same").read_bytes() == wheel.read_bytes()
    with open(copy / "server" / "loop.py", "a") as handle:
        handle.write("\n# changed\n")
    assert env_wheel_digest() != digest
    assert env_wheel(tmp_path / "changed").read_bytes() != wheel.read_bytes()


def test_the_venv_hash_follows_the_wheels_digest(monkeypatch):
    backend = venv_module.VenvBackend(requirements=("numpy<2",))
    before = venv_module.venv_hash(backend)
    monkeypatch.setattr(venv_module, "env_wheel_digest", lambda: "0" * 64)
    assert venv_module.venv_hash(backend) != before


def _link_packages(site: Path, names: tuple) -> None:
    """The agent's copies of the top-level packages ``names`` (and their ``.libs`` folders of shared
    libraries) made importable in the venv whose site-packages is ``site``, and nothing else of the agent's."""
    shelf = site.parent / "agent-packages"
    shelf.mkdir(exist_ok=True)
    for name in names:
        spec = importlib.util.find_spec(name)
        folder = Path(spec.submodule_search_locations[0]) if spec.submodule_search_locations else Path(spec.origin)
        for path in [folder, *folder.parent.glob(f"{name}*.libs"), *folder.parent.glob(f"py{name}*.libs")]:
            if not (shelf / path.name).exists():
                (shelf / path.name).symlink_to(path)
    (site / "agent-packages.pth").write_text(f"{shelf}\n")


def test_the_wheel_installs_into_a_fresh_venv_where_the_env_server_imports_without_gymnasium(wheel, tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    install = [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--no-index", str(wheel)]
    subprocess.run([*install, "--quiet", "--disable-pip-version-check"], check=True, cwd=tmp_path)
    site = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    assert (site / "portal_shm" / "server" / "loop.py").is_file()
    assert (site / DIST_INFO / "INSTALLER").is_file()  # installed as a distribution, not copied
    _link_packages(site, ("numpy", "zmq", "msgpack"))  # what the wheel requires (--no-deps: no index here)
    check = (
        "import sys, importlib.util, portal_shm, portal_shm.server, portal_shm.wire\n"
        f"assert portal_shm.__file__.startswith({str(site)!r}), portal_shm.__file__\n"
        f"assert portal_shm.__version__ == {__version__!r}\n"
        "assert importlib.util.find_spec('gymnasium') is None\n"
        "bad = {'gymnasium', 'rich', 'docker', 'cloudpickle'} & set(sys.modules)\n"
        "assert not bad, bad\n"
        "try:\n"
        "    import portal_shm.presets\n"
        "except ModuleNotFoundError as exc:\n"  # the presets are gymnasium wrappers: all they lack
        "    assert exc.name == 'gymnasium', exc\n"
        "else:\n"
        "    raise AssertionError('the presets imported without gymnasium')\n"
    )
    result = subprocess.run([str(python), "-c", check], capture_output=True, text=True, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    _link_packages(site, ("gymnasium", "cloudpickle", "typing_extensions", "farama_notifications"))
    result = subprocess.run(
        [str(python), "-c", "import portal_shm.presets, portal_shm.example_envs; print(portal_shm.presets.__file__)"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(str(site))


ENV_IMAGES = [name for name in builtin_images() if name != "agent"]


@pytest.mark.parametrize("name", ENV_IMAGES)
def test_env_images_install_the_env_side_from_the_wheel_and_carry_no_source(name):
    dockerfile = (builtin_images_dir() / name / "Dockerfile").read_text()
    build_stage, _, final_stage = dockerfile.partition("\nFROM ${BASE_IMAGE}\n")
    assert "FROM ${BASE_IMAGE} AS build" in build_stage  # the base stays a build arg
    assert "COPY _wheels/ /tmp/wheels/" in build_stage
    assert "/opt/venv/bin/pip install --no-cache-dir --no-index --find-links /tmp/wheels portal-shm-env" in build_stage
    assert "COPY --from=build /opt/venv /opt/venv" in final_stage and "_wheels" not in final_stage
    assert "/opt/portal-shm" not in dockerfile and "_portal_shm" not in dockerfile


@pytest.mark.parametrize("name", ["ale", "agent"])
def test_a_build_context_carries_the_wheel_and_source_only_where_the_dockerfile_names_it(name, tmp_path, monkeypatch):
    monkeypatch.setattr(image_build, "write_pip_context", lambda target: target.mkdir())  # (asks pip: a second)
    assemble_context(builtin_images_dir() / name, tmp_path / "context")
    wheels = tmp_path / "context" / "_wheels"
    assert [p.name for p in wheels.iterdir()] == [wheel_filename()]
    assert (wheels / wheel_filename()).read_bytes() == env_wheel(tmp_path / "fresh").read_bytes()
    # the agent image needs the agent side too: the whole package as source on its PYTHONPATH
    assert (tmp_path / "context" / "_portal_shm" / "portal_shm" / "agent").is_dir() == (name == "agent")
