"""``backend="docker"`` without ``image=`` still runs ``portal-shm/ale``, but says so, once a process,
pointing at the caller's line; naming the image (even that one) is silent."""

import subprocess
import sys
import textwrap

from portal_shm.runtimes.docker import DEFAULT_IMAGE, DockerBackend


def _warnings_of(code: str) -> str:
    result = subprocess.run(
        [sys.executable, "-W", "default", "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    return result.stderr


def test_the_default_image_is_named_once_per_process_at_the_callers_line():
    err = _warnings_of("""
        from portal_shm.runtimes.registry import resolve_backend
        backend = resolve_backend("docker")
        again = resolve_backend("docker")
        assert type(backend.image) is str and backend == again  # a plain str once made: pickles, compares
    """)
    assert err.count("UserWarning") == 1, err
    assert '<string>:3: UserWarning: backend="docker" without image=: the envs run in portal-shm/ale' in err
    assert 'image="portal-shm/vizdoom"' in err


def test_a_named_image_is_silent_and_a_plain_string():
    err = _warnings_of("""
        from portal_shm.runtimes.docker import DockerBackend
        backend = DockerBackend(image="portal-shm/ale")
        assert type(backend.image) is str
    """)
    assert "UserWarning" not in err, err


def test_the_default_stays_readable_as_the_class_attribute():
    assert DockerBackend.image == DEFAULT_IMAGE == "portal-shm/ale"
