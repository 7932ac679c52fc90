"""README.md opens with the two set-up commands, and CI runs the test command it shows."""

import pathlib

ROOT = pathlib.Path(__file__).parents[2]


def _opening_commands() -> list:
    lines = (ROOT / "README.md").read_text().splitlines()
    blocks, inside = [], False
    for line in lines:
        if line.startswith("```"):
            inside = not inside
            continue
        if inside and len(blocks) < 2 and line.strip():
            blocks.append(line.strip())
        if len(blocks) == 2 and not inside:
            break
    return blocks


def test_readme_starts_with_main_job_and_test_commands():
    main_job, tests = _opening_commands()
    assert "portal-shm run" in main_job
    assert "pytest" in tests


def test_ci_runs_the_readme_test_command():
    _, tests = _opening_commands()
    assert tests in (ROOT / ".ci" / "run").read_text()
