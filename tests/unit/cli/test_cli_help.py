"""The ``portal-shm`` parser: every flag documented with its default, exact flag names, and errors
that show the verb's own usage with the flag that was meant; output that is not split off a terminal."""

import argparse
import os
import subprocess
import sys

import pytest

from portal_shm.cli.app import BACKEND_NAMES, build_parser
from portal_shm.cli.parser import Parser, Subcommand
from portal_shm.runtimes.registry import BACKENDS


def _verbs(parser: argparse.ArgumentParser, path: tuple = ("portal-shm",)):
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _verbs(sub, path + (name,))


VERBS = list(_verbs(build_parser()))
ARGUMENTS = [
    pytest.param(parser, action, id=" ".join(path[1:] + tuple(action.option_strings or [action.dest])[:1]))
    for path, parser in VERBS
    for action in parser._actions
    if not isinstance(action, (argparse._HelpAction, argparse._VersionAction, argparse._SubParsersAction))
]


def test_every_verb_refuses_abbreviations_and_reports_its_own_errors():
    assert len(VERBS) > 15
    for path, parser in VERBS:
        assert parser.allow_abbrev is False, path
        assert isinstance(parser, Subcommand if len(path) > 1 else Parser), path


@pytest.mark.parametrize("parser, action", ARGUMENTS)
def test_every_argument_has_help_that_states_its_default(parser, action):
    assert action.help and action.help.strip(), f"{parser.prog} {action.option_strings or action.dest}: no help"
    shown = parser.formatter_class(parser.prog)._get_help_string(action) % {**vars(action), "prog": parser.prog}
    given = action.default not in (None, False, [], (), argparse.SUPPRESS)
    if given and (action.option_strings or action.nargs in ("?", "*")):
        assert "default" in shown, f"{parser.prog} {action.option_strings or action.dest}: {shown!r}"


def test_run_help_lists_its_flags_with_defaults(capsys):
    with pytest.raises(SystemExit) as exit:
        build_parser().parse_args(["run", "--help"])
    assert exit.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "usage: portal-shm run" in text
    assert "--num-envs NUM_ENVS number of envs stepped together (default: 8)" in text
    assert "--seconds SECONDS how long to step, after start-up (default: 10.0)" in text
    assert "--image IMAGE docker backend: the image the envs run in" in text
    assert "(default: ALE/Pong-v5)" in text


@pytest.mark.parametrize(
    "argv, meant",
    [
        (["run", "--num_envs", "8"], "--num-envs"),
        (["run", "--second", "3"], "--seconds"),  # an abbreviation: refused, not taken for --seconds
        (["run", "--imag", "portal-shm/ale"], "--image"),
        (["build", "ale", "--bas", "portal-shm/base:bookworm"], "--base"),
        (["env", "create", "--pythn", "python3"], "--python"),
        (["gc", "--dry_run"], "--dry-run"),
    ],
)
def test_a_misspelled_flag_shows_the_verbs_usage_and_the_flag_meant(argv, meant, capsys):
    with pytest.raises(SystemExit) as exit:
        build_parser().parse_args(argv)
    assert exit.value.code == 2
    err = capsys.readouterr().err
    verb = "portal-shm " + " ".join(a for a in argv[:2] if not a.startswith("-") and a != "ale")
    assert err.startswith(f"usage: {verb} "), err
    assert f"did you mean {meant}?" in err and f"(see {verb} --help)" in err


def test_the_entry_point_reports_run_errors_with_runs_usage():
    result = subprocess.run(
        [sys.executable, "-m", "portal_shm", "run", "--num_envs", "8"], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.startswith("usage: portal-shm run ") and "[-n NUM_ENVS]" in result.stderr
    assert "COMMAND ..." not in result.stderr  # the top-level usage (a list of verbs) is no help here
    assert "unrecognized arguments: --num_envs" in result.stderr and "did you mean --num-envs?" in result.stderr


def test_run_backend_choices_are_the_registrys_and_the_hosts():
    assert set(BACKEND_NAMES) == set(BACKENDS) | {"remote", "ray"}
    with pytest.raises(SystemExit):
        build_parser().parse_args(["run", "--backend", "dokcer"])


def _piped(*argv: str, timeout: float = 120) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    return subprocess.run(
        [sys.executable, "-m", "portal_shm", *argv], capture_output=True, text=True, timeout=timeout, env=env
    )


def test_run_image_needs_a_container_backend():
    result = _piped("run", "CartPole-v1", "--image", "portal-shm/ale")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.startswith("usage: portal-shm run ")
    assert "--backend process runs no image: add --backend docker" in result.stderr


def test_piped_output_keeps_long_lines_whole():
    result = _piped("run", "CartPole-v1", "-n", "2", "--seconds", "0.3")
    assert result.returncode == 0, result.stderr
    ready = [line for line in result.stdout.splitlines() if " ready in " in line]
    assert len(ready) == 1 and len(ready[0]) > 120, result.stdout  # one line, past rich's 80 columns
    assert "observation Box(" in ready[0] and "(4,), float32)" in ready[0] and ready[0].endswith("Discrete(2)")


def test_piped_output_keeps_a_long_path_on_one_line(tmp_path):
    cache = tmp_path / ("a-cache-folder-with-a-long-name-" * 4)
    result = _piped("env", "ls", "--cache-dir", str(cache), timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"no cached runtimes in {cache}\n"
