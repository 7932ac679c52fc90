"""README.md and the docs site (``docs/``) as a newcomer uses them: README's set-up commands are CI's,
every ``python`` and ``bash`` block of every page runs as it stands, or says in an HTML comment just
above it why it cannot run here, and every page is in the site's navigation.

The marks (invisible on GitHub):

- ``<!-- not run: REASON -->``: a second machine, Docker, a benchmark of minutes, ...
- ``<!-- run: with a host on 127.0.0.1 as box ... -->``: the remote walk-through (docs/backends/remote.md), run in order
  against a real ``portal-shm host`` started here on 127.0.0.1 with a home of its own (``box``),
  the agent with another home; ``scp`` becomes ``cp`` between the two homes.

Blocks run with fewer envs and steps (``SHRINK``) unless ``PORTAL_SHM_README_FULL=1``. A block that
imports a package of ``OPTIONAL`` is skipped, with the reason, where that package is not installed.
"""

from __future__ import annotations

import getpass
import importlib.util
import os
import pathlib
import re
import subprocess
import sys
from dataclasses import dataclass
from typing import Optional

import pytest

from testkit.host_daemon import HostDaemon

ROOT = pathlib.Path(__file__).parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
PAGES = [README] + sorted(p for p in DOCS.rglob("*.md") if "hooks" not in p.parts)
FULL = os.environ.get("PORTAL_SHM_README_FULL") == "1"

# (as written, as run here): the same code on fewer envs and steps. Each must match some block.
SHRINK = [
    ("range(1000)", "range(20)"),
    ('"ALE/Pong-v5",\n    256,', '"ALE/Pong-v5",\n    8,'),
    ('{"batch_size": 32}', '{"batch_size": 4}'),
]

# Packages of extras that a dev install may lack (torchrl needs Python 3.10+): name -> how to get it.
OPTIONAL = {"torchrl": "pip install torchrl (the torchrl extra; Python 3.10+)"}

MARK = re.compile(r"^<!-- (not run|run): (.+?) -->$")
HOST_MARK = "with a host on 127.0.0.1 as box"


@dataclass
class Block:
    lang: str
    code: str
    line: int
    mark: Optional[tuple] = None  # ("not run" | "run", text)
    page: str = "README.md"

    @property
    def id(self) -> str:
        first = next((line for line in self.code.splitlines() if line.strip()), "")
        return f"{self.page}:{self.line}:{first[:40]}"


def page_blocks(path: pathlib.Path) -> list:
    """Every fenced block of one page with its language and the mark just above it, if any."""
    blocks, current, above = [], None, None
    page = path.relative_to(ROOT).as_posix()
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if current is None:
            fence = re.match(r"^```(\w*)\s*$", line)
            if fence:
                mark = MARK.match(above).groups() if above else None
                current = Block(fence.group(1), "", number, mark, page)
            elif line.strip():
                above = line.strip() if MARK.match(line.strip()) else None
        elif line.startswith("```"):
            blocks.append(current)
            current, above = None, None
        else:
            current.code += line + "\n"
    return blocks


def all_blocks() -> list:
    """The blocks of README.md, then of every docs page, in order."""
    return [block for path in PAGES for block in page_blocks(path)]


def _runnable() -> list:
    return [b for b in all_blocks() if b.lang in ("python", "bash") and b.mark is None]


def _with_host() -> list:
    return [b for b in all_blocks() if b.mark and b.mark[0] == "run"]


def shrunk(code: str) -> str:
    if FULL:
        return code
    for written, run in SHRINK:
        code = code.replace(written, run)
    return code


def _opening_commands() -> list:
    lines = README.read_text().splitlines()
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


def test_every_block_runs_or_says_why_not():
    blocks = [b for b in all_blocks() if b.lang in ("python", "bash")]
    for block in blocks:
        if block.mark is None:
            continue
        kind, text = block.mark
        if kind == "not run":
            assert len(text) >= 10, f"{block.id}: say why it is not run"
        else:
            assert text.startswith(HOST_MARK), f"{block.id}: unknown mark 'run: {text}'"
    assert _runnable() and _with_host()
    assert not [b.id for b in all_blocks() if b.lang == "" and "import " in b.code and b.mark is None], (
        "a block of code without its language: mark it ```python or ```bash"
    )


def test_every_shrink_applies_to_a_block_it_runs():
    code = "".join(b.code for b in _runnable() + _with_host())
    assert [written for written, _ in SHRINK if written not in code] == []


def _run(block: Block, cwd: pathlib.Path, env: dict, code: Optional[str] = None) -> None:
    code = shrunk(block.code) if code is None else code
    if block.lang == "python":
        script = cwd / f"readme_{block.line}.py"
        script.write_text(code)
        command = [sys.executable, str(script)]
    else:
        command = ["bash", "-euo", "pipefail", "-c", code]
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"{block.id} failed:\n{code}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"


def _env(home: pathlib.Path) -> dict:
    """This interpreter's environment with ``home`` as the home directory (so ``~/.config`` is its own)."""
    env = {key: value for key, value in os.environ.items() if key not in ("XDG_CONFIG_HOME", "PORTAL_SHM_KEYS")}
    user = getpass.getuser()
    env.update(HOME=str(home), USER=user, LOGNAME=user)
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")  # (portal-shm, python)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    return env


@pytest.mark.integration  # whole programs: Pong, SB3, remote hosts
@pytest.mark.parametrize("block", _runnable(), ids=lambda b: b.id)
def test_block_runs(block, tmp_path):
    for name, how in OPTIONAL.items():
        if re.search(rf"^(from|import) {name}\b", block.code, re.M) and importlib.util.find_spec(name) is None:
            pytest.skip(f"{block.id} needs {name}, not installed: {how}")
    home = tmp_path / "home"
    home.mkdir()
    _run(block, tmp_path, _env(home))


@pytest.mark.integration
def test_remote_walk_through_runs_against_a_host_on_loopback(tmp_path):
    """The agent's blocks of the remote walk-through, in order, against a host on 127.0.0.1."""
    box, agent = tmp_path / "box", tmp_path / "agent"
    box.mkdir()
    agent.mkdir()
    host = HostDaemon("--bind", "tcp://127.0.0.1:0", env=_env(box))
    try:
        _, address = host.banner()
        for block in _with_host():
            code = shrunk(block.code)
            if block.lang == "bash":  # the second machine's home is a folder here
                code = code.replace("scp ", "cp ").replace("box:", f"{box}/")
            else:
                assert "tcp://box:5555" in code, block.id
                code = code.replace("tcp://box:5555", address)
            _run(block, agent, _env(agent), code)
    finally:
        host.kill()
    assert any((box / ".config/portal-shm/host/clients").glob("*@*.key"))


# Pages for contributors, where installing the checkout itself (editable) is the point.
CONTRIBUTOR_PAGES = {"README.md", "docs/install.md", "docs/development.md"}


def test_install_lines_install_a_release_with_extras_it_has():
    """Users install a release (its wheels with --find-links, or an index), never a checkout or a wheel
    built from one: editable installs only on the contributors' pages; the extras named are the agent
    distribution's (the root pyproject's, which scripts/release.sh keeps: tests/unit/test_release.py)."""
    tomllib = pytest.importorskip("tomllib" if sys.version_info >= (3, 11) else "tomli")
    extras = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"])
    installs = [
        (block.page, line.split("#")[0].strip())
        for block in all_blocks()
        for line in block.code.splitlines()
        if re.search(r"\bpip (install|wheel)\b", line)
    ]
    assert installs
    for page, line in installs:
        for named in re.findall(r"portal-shm\[([a-z,]+)\]", line):
            assert set(named.split(",")) <= extras, f"{page}: {line}: no extra {set(named.split(',')) - extras}"
        assert "pip wheel" not in line and "portal_shm-" not in line, f"{page}: {line}: install the release's wheels"
        if re.search(r"pip install (-\S+ )*(-e|\.|/)", line):
            assert page in CONTRIBUTOR_PAGES, f"{page}: {line}: installs a checkout on a page for users"
    releases = [line for _, line in installs if "--find-links DIR 'portal-shm[" in line]
    assert releases, "no page installs a release's wheels"


def _nav_pages() -> list:
    import yaml

    class _Loader(yaml.SafeLoader):  # mkdocs.yml names a Python function with a !!python/name tag
        pass

    _Loader.add_multi_constructor("tag:yaml.org,2002:python/name:", lambda loader, suffix, node: suffix)
    config = yaml.load((ROOT / "mkdocs.yml").read_text(), Loader=_Loader)

    def walk(entries: list) -> list:
        found = []
        for entry in entries:
            value = entry if isinstance(entry, str) else next(iter(entry.values()))
            found += walk(value) if isinstance(value, list) else [value]
        return found

    return walk(config["nav"])


def test_every_docs_page_is_in_the_nav_and_every_nav_entry_exists():
    nav = _nav_pages()
    pages = sorted(p.relative_to(DOCS).as_posix() for p in PAGES[1:])
    assert sorted(set(nav)) == sorted(nav), "a page is twice in mkdocs.yml's nav"
    assert [p for p in nav if not (DOCS / p).is_file()] == [], "mkdocs.yml's nav names a page that does not exist"
    assert [p for p in pages if p not in nav] == [], "a docs page is missing from mkdocs.yml's nav"


def test_readme_links_point_at_files_that_exist():
    links = re.findall(r"\]\(((?:docs/|[A-Z]+\.md)[^)#\s]*)(?:#[^)\s]*)?\)", README.read_text())
    assert links
    assert [link for link in links if not (ROOT / link).exists()] == []


# What the site may load from other hosts: nothing. Links a reader follows (<a href>) are not loads.
LOADS = re.compile(r"<(script|link|img|iframe|source)\b[^>]*?\b(?:src|href)=\"((?:https?:)?//[^\"]+)\"", re.I)


def test_built_site_loads_nothing_from_other_hosts(tmp_path):
    """The site works offline and tells no third party who reads it: no page loads a script, a style
    sheet, a font or an image from another host (Material's web fonts are off, Mermaid is vendored
    in docs/assets/vendor), and the pages with diagrams load that copy. A broken link is not this
    test's to find (``--no-strict``): CI's strict build is."""
    pytest.importorskip("mkdocs")
    pytest.importorskip("material")
    site = tmp_path / "site"
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--no-strict", "--quiet", "--site-dir", str(site)],
        cwd=ROOT,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    pages = sorted(site.rglob("*.html"))
    assert len(pages) >= len(_nav_pages())
    loads = [(p.relative_to(site).as_posix(), m.group(2)) for p in pages for m in LOADS.finditer(p.read_text())]
    assert loads == [], "pages load from other hosts"
    named = [
        p.relative_to(site).as_posix() for p in pages if re.search(r"cdn\.|unpkg|jsdelivr|googleapis", p.read_text())
    ]
    assert named == [], "pages name a CDN"
    with_diagrams = [p for p in pages if 'class="mermaid"' in p.read_text()]
    assert with_diagrams, "no page has a diagram: is the mermaid fence still configured?"
    for page in with_diagrams:
        scripts = re.findall(r'<script src="([^"]*mermaid[^"]*)"', page.read_text())
        assert scripts and (page.parent / scripts[0]).resolve().is_file(), page
