"""``portal-shm --version`` and ``portal-shm build --list``: what an installed portal-shm is and holds."""

import pytest

from portal_shm.cli.app import build_parser, main
from portal_shm.runtimes.image_build import builtin_images
from portal_shm.version import __version__
from portal_shm.wire.protocol import PROTOCOL_VERSION


def test_version_names_the_package_version_and_the_env_side_protocol(capsys):
    with pytest.raises(SystemExit) as exit:
        build_parser().parse_args(["--version"])
    assert exit.value.code == 0
    assert capsys.readouterr().out == f"portal-shm {__version__} (env-side protocol {PROTOCOL_VERSION})\n"


def test_build_list_shows_each_builtin_image_on_one_line(capsys):
    with pytest.raises(SystemExit) as exit:
        main(["build", "--list"])
    assert exit.value.code == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines] == builtin_images()
    assert "ale" in builtin_images() and "legacy" in builtin_images()
    (ale,) = [line for line in lines if line.startswith("ale ")]
    assert "ALE/Pong-v5" in ale and "Atari" in ale


def test_build_without_a_target_or_list_says_what_it_needs(capsys):
    with pytest.raises(SystemExit) as exit:
        main(["build"])
    assert exit.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: portal-shm build ") and "name what to build (NAME|DIR|base), or --list" in err
