"""What ``portal-shm`` prints when something is wrong: errors exactly as the code words them (rich
markup would eat every ``[...]``: ``portal-shm[docker]``, ``[runtime: ...]``), and usage errors,
numeric flags out of range included, reported by argparse naming the flag, exit status 2."""

import argparse
import os
import subprocess
import sys

import pytest

from portal_shm.cli import args as cli_args
from portal_shm.cli.app import COMMAND_GROUPS, build_parser, main
from portal_shm.errors import PortalError

BRACKETS = "the docker backend needs the docker SDK: pip install 'portal-shm[docker]' [runtime: process pid 7, python]"


def _verbs(parser: argparse.ArgumentParser, path: tuple = ()):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield path + (name,), sub
                yield from _verbs(sub, path + (name,))


VERBS = list(_verbs(build_parser()))


def _exit_code(argv: list) -> int:
    with pytest.raises(SystemExit) as exit:
        main(argv)
    return exit.value.code


@pytest.mark.parametrize("error", [PortalError, ValueError])
def test_an_error_prints_its_brackets_as_written(monkeypatch, capsys, error):
    from portal_shm.runtimes import gc

    def collect(dry_run):
        raise error(BRACKETS)

    monkeypatch.setattr(gc, "collect", collect)
    assert _exit_code(["gc"]) == 1
    out, err = capsys.readouterr()
    assert err == f"error: {BRACKETS}\n" and out == ""


def test_run_on_docker_without_the_sdk_names_the_extra_to_install(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "docker", None)  # `import docker` raises ImportError
    assert _exit_code(["run", "CartPole-v1", "-n", "1", "--seconds", "0.1", "--backend", "docker"]) == 1
    wanted = "error: the docker backend needs the docker SDK: pip install 'portal-shm[docker]' (or pip install docker)"
    assert wanted in capsys.readouterr().err


def test_an_env_error_keeps_its_runtime_tag_through_the_entry_point():
    result = subprocess.run(
        [sys.executable, "-m", "portal_shm", "run", "no_such_module_for_the_cli:make", "-n", "1", "--seconds", "0.1"],
        capture_output=True,
        text=True,
        timeout=120,
        env={k: v for k, v in os.environ.items() if k != "COLUMNS"},
    )
    assert result.returncode == 1 and "Traceback" not in result.stderr
    (line,) = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert "entry point 'no_such_module_for_the_cli:make'" in line
    assert "[runtime: process pid " in line and line.endswith("]")


def test_a_table_shows_text_in_brackets(monkeypatch, capsys, tmp_path):
    from portal_shm.runtimes import cache

    runtime = {"hash": "ab12", "kind": "venv", "complete": True, "requirements": ["gymnasium[atari]", "ale-py"]}
    runtime.update(python_version="3.11.7 (main)", size=2048, created=0.0)
    monkeypatch.setattr(cache, "list_runtimes", lambda cache_dir=None: [runtime])
    assert _exit_code(["env", "ls", "--cache-dir", str(tmp_path)]) == 0
    assert "gymnasium[atari] ale-py" in capsys.readouterr().out


@pytest.mark.parametrize(
    "argv, flag",
    [
        (["run", "-n", "0"], "-n/--num-envs"),
        (["run", "--num-envs", "-3"], "-n/--num-envs"),
        (["run", "--seconds", "-1"], "--seconds"),
        (["run", "--seconds", "0"], "--seconds"),
        (["run", "--seconds", "nan"], "--seconds"),
        (["run", "--seconds", "ten"], "--seconds"),
        (["run", "--batch-size", "0"], "--batch-size"),
        (["run", "--envs-per-server", "0"], "--envs-per-server"),
        (["run", "--seed", "-1"], "--seed"),
        (["run", "--kwarg", "frameskip"], "--kwarg"),
        (["record", "ENV", "--episodes", "0"], "--episodes"),
        (["record", "ENV", "--env-index", "-1"], "--env-index"),
        (["record", "ENV", "--fps", "0"], "--fps"),
        (["record", "ENV", "--max-steps", "0"], "--max-steps"),
        (["tune", "ENV", "-n", "0"], "-n/--num-envs"),
        (["tune", "ENV", "-n", "4", "--budget-s", "0"], "--budget-s"),
        (["tune", "ENV", "-n", "4", "--policy-ms", "-1"], "--policy-ms"),
        (["tune", "ENV", "-n", "4", "--envs-per-server", "2,0"], "--envs-per-server"),
        (["tune", "ENV", "-n", "4", "--rounds", "0"], "--rounds"),
        (["bench", "-n", "0"], "-n/--num-envs"),
        (["bench", "--seconds", "-1"], "--seconds"),
        (["bench", "--repeat", "0"], "--repeat"),
        (["bench", "--warmup", "-1"], "--warmup"),
        (["bench", "--rtt-ms", "-5"], "--rtt-ms"),
        (["bench", "--limit", "portal-docker=0"], "--limit"),
        (["top", "--interval", "5"], "--interval"),
        (["top", "--max-envs", "-1"], "--max-envs"),
        (["start", "ale", "--count", "0"], "--count"),
        (["logs", "psm-x", "--tail", "0"], "--tail"),
        (["test", "ale", "--steps", "0"], "--steps"),
        (["test", "ale", "-n", "0"], "-n/--num-envs"),
        (["host", "--max-envs", "0"], "--max-envs"),
        (["host", "--max-fds", "-1"], "--max-fds"),
        (["host", "--max-cpus", "0"], "--max-cpus"),
        (["host", "--heartbeat-timeout", "0"], "--heartbeat-timeout"),
        (["host", "--step-timeout", "-1"], "--step-timeout"),
    ],
)
def test_a_value_out_of_range_is_a_usage_error_naming_the_flag(argv, flag, capsys):
    assert _exit_code(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"usage: portal-shm {argv[0]} ") and f"error: argument {flag}: expected " in err


def test_every_numeric_flag_is_checked_by_its_type():
    """A bare int or float lets ``--num-envs 0`` through to the library; every number has a bound."""
    unchecked = [
        f"portal-shm {' '.join(path)} {action.option_strings or action.dest}"
        for path, parser in VERBS
        for action in parser._actions
        if action.type in (int, float)
    ]
    assert not unchecked


def test_bounds_of_the_number_types():
    assert cli_args.positive_int("3") == 3 and cli_args.non_negative_int("0") == 0
    assert cli_args.positive_seconds("0.5") == 0.5 and cli_args.non_negative_float("0") == 0.0
    assert cli_args.bounded(float, 0.1, 1.0)("1") == 1.0
    for parse, text in [
        (cli_args.positive_int, "0"),
        (cli_args.positive_int, "1.5"),
        (cli_args.non_negative_int, "-1"),
        (cli_args.positive_float, "0"),
        (cli_args.positive_float, "inf"),
        (cli_args.bounded(float, 0.1, 1.0), "1.01"),
    ]:
        with pytest.raises(argparse.ArgumentTypeError, match=f"got '{text}'"):
            parse(text)


def test_two_flags_that_disagree_are_a_usage_error_of_the_verb(capsys):
    assert _exit_code(["record", "ENV", "-n", "3", "--env-index", "3"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: portal-shm record ")
    assert "--env-index 3 is not one of the 3 envs: give an index below --num-envs" in err


def test_kwarg_is_the_name_and_init_arg_its_hidden_alias(capsys):
    parser = build_parser()
    args = parser.parse_args(["test", "ale", "--init-arg", "size=12", "--kwarg", "mode=hard"])
    assert cli_args.parse_kwargs(args.kwarg) == {"size": 12, "mode": "hard"}
    for verb in ("run", "record", "tune", "test", "build-run-test"):
        (sub,) = [sub for path, sub in VERBS if path == (verb,)]
        text = sub.format_help()
        assert "--kwarg KEY=VALUE" in text and "--init-arg KEY" not in text, verb
        assert [a.dest for a in sub._actions if "--init-arg" in a.option_strings] == ["kwarg"]
    assert "old name: --init-arg" in [sub for path, sub in VERBS if path == ("test",)][0].format_help()


def test_every_command_is_described_and_in_one_group_of_the_help(capsys):
    undescribed = [" ".join(path) for path, parser in VERBS if not (parser.description or "").strip()]
    assert not undescribed
    grouped = [name for _, names in COMMAND_GROUPS for name in names]
    assert sorted(grouped) == sorted(path[0] for path, _ in VERBS if len(path) == 1)
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--help"])
    text = capsys.readouterr().out
    headings = [line.strip() for line in text.splitlines() if line.startswith("  ") and line.strip().endswith(":")]
    assert headings == [f"{title}:" for title, _ in COMMAND_GROUPS]
    for name in grouped:  # each verb on a line of its own, a level below its group
        assert any(line.startswith(f"    {name} ") for line in text.splitlines()), name
    assert "other:" not in text
