"""``portal-shm build`` against a real Docker engine: progress per step, the tail of a failed build,
a missing local base refused at once with the command that makes it; ``run --backend docker``
names the image it picked. Images are built ``FROM scratch``, so no registry is needed."""

import os
import subprocess
import sys
import time

import pytest

from portal_shm.runtimes.image_build import TAIL_LINES, ImageBuildError, base_build_command, build_image

pytestmark = pytest.mark.integration

TAG = "portal-shm-test/cli-build"


@pytest.fixture
def scratch_dir(tmp_path, docker_client):
    """An image directory whose Dockerfile copies files onto ``scratch``; the image goes afterwards."""
    (tmp_path / "hello.txt").write_text("hello\n")
    yield tmp_path
    try:
        docker_client.images.remove(TAG, force=True)
    except Exception:
        pass


def _portal_shm(*argv: str, env: dict = None) -> subprocess.CompletedProcess:
    environment = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "PORTAL_SHM_BASE_IMAGE")}
    return subprocess.run(
        [sys.executable, "-m", "portal_shm", *argv],
        capture_output=True,
        text=True,
        timeout=180,
        env={**environment, **(env or {})},
    )


def test_the_command_that_makes_a_local_base_is_named_per_suite():
    assert base_build_command("portal-shm/base:bookworm") == "portal-shm build base"
    assert base_build_command("portal-shm/base:bullseye") == "portal-shm build base --suite bullseye"
    assert base_build_command("portal-shm/base:mine") == "portal-shm build base --suite SUITE -t portal-shm/base:mine"


@pytest.mark.parametrize("how", ["--base", "PORTAL_SHM_BASE_IMAGE"])
def test_building_on_a_local_base_not_built_fails_at_once_naming_the_fix(how, docker_client):
    missing = "portal-shm/base:no-such-base"
    flags, env = (["--base", missing], None) if how == "--base" else ([], {"PORTAL_SHM_BASE_IMAGE": missing})
    started = time.monotonic()
    result = _portal_shm("build", "ale", "-t", TAG, *flags, env=env)
    assert result.returncode == 1, result.stdout + result.stderr
    assert f"base image {missing} is not built on this machine: build a base first: portal-shm build base" in (
        result.stderr
    )
    assert "Traceback" not in result.stderr and "registry-1.docker.io" not in result.stderr
    assert "Step 1/" not in result.stdout  # refused before docker started building
    assert time.monotonic() - started < 30
    with pytest.raises(Exception):
        docker_client.images.get(TAG)


def test_piped_build_prints_each_step_and_the_result(scratch_dir):
    (scratch_dir / "Dockerfile").write_text("ARG BASE_IMAGE=scratch\nFROM ${BASE_IMAGE}\nCOPY hello.txt /hello.txt\n")
    result = _portal_shm("build", str(scratch_dir), "-t", TAG, "--base", "scratch")
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    steps = [line for line in lines if line.startswith(f"building {scratch_dir}: Step ")]
    assert [s.split(" : ")[1] for s in steps[:3]] == [
        "ARG BASE_IMAGE=scratch",
        "FROM ${BASE_IMAGE}",
        "COPY hello.txt /hello.txt",
    ]
    assert lines[-1].startswith(f"built {TAG} in ")


def test_a_failed_build_quotes_the_last_lines_of_its_output(scratch_dir):
    copies = "".join(f"COPY hello.txt /hello-{i}.txt\n" for i in range(TAIL_LINES))
    (scratch_dir / "Dockerfile").write_text(f"FROM scratch\n{copies}COPY missing.txt /missing.txt\n")
    seen: list = []
    with pytest.raises(ImageBuildError) as failure:
        build_image(str(scratch_dir), TAG, base="scratch", on_line=seen.append)
    message = str(failure.value)
    head, _, tail = message.partition("the last lines of the build:\n")
    assert f"building {TAG} from {scratch_dir} failed" in head
    quoted = tail.splitlines()
    assert len(quoted) == TAIL_LINES and "COPY missing.txt /missing.txt" in tail and "missing.txt" in quoted[-1]
    assert "Step 1/" not in tail  # only the end of the output: the steps that led to the failure
    assert any(line.startswith("Step 1/") for line in seen) and any("COPY missing.txt" in line for line in seen)


def test_a_base_that_no_registry_gives_fails_at_its_from_step_with_the_fix(scratch_dir):
    (scratch_dir / "Dockerfile").write_text("ARG BASE_IMAGE=scratch\nFROM ${BASE_IMAGE}\nCOPY hello.txt /hello.txt\n")
    result = _portal_shm("build", str(scratch_dir), "-t", TAG, "--base", "portal-shm-test/no-such-base:never")
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert "failed at its FROM step: docker could not get the base portal-shm-test/no-such-base:never" in result.stderr
    assert "Build a local base first: portal-shm build base" in result.stderr


def test_run_on_the_docker_backend_names_the_image_it_picked(docker_client):
    from testkit.docker_images import ensure_image

    ensure_image(docker_client, "ale", "portal-shm/ale")
    result = _portal_shm("run", "CartPole-v1", "-n", "1", "--seconds", "0.3", "--backend", "docker")
    assert result.returncode == 0, result.stderr
    assert "note: the envs run in portal-shm/ale: choose the image with --image" in result.stderr
    assert "UserWarning" not in result.stderr  # the CLI names it once, in its own words
    chosen = _portal_shm(
        "run", "CartPole-v1", "-n", "1", "--seconds", "0.3", "--backend", "docker", "--image", "portal-shm/ale"
    )
    assert chosen.returncode == 0 and "note:" not in chosen.stderr, chosen.stderr
