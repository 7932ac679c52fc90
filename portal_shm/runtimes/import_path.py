"""Which of the agent's import paths an env server that a backend starts on this machine gets.

AsyncVectorEnv's workers see the agent's ``sys.path`` (multiprocessing's spawn hands it over, the
script's folder ``sys.path[0]`` included), so ``make_vec("myenvs:cart")`` in ``/proj/myenvs.py``
must find ``myenvs`` in the env server as ``import myenvs`` finds it in the agent, whatever the
working directory. The process, venv and micromamba backends pass these entries in the server's
config (``"import_path"``) rather than in ``PYTHONPATH``: the user's ``PYTHONPATH`` stays as they
set it, and the env's own subprocesses (a game engine started with another Python) never inherit
the agent's folders. The server puts them first on its ``sys.path``, in the agent's order
(``portal_shm.server.import_path``). Containers have files of their own and get none; a remote
host is the agent of its own servers, which get the host's path.
"""

from __future__ import annotations

import os
import site
import sys
import sysconfig


def agent_import_path(same_interpreter: bool) -> list[str]:
    """The agent's ``sys.path`` entries for a server on this machine, absolute, in order.

    ``same_interpreter``: the server runs the agent's own interpreter (the process backend's
    default), so it gets every entry, as a spawned worker would. Otherwise (a venv, a conda env,
    ``python=`` another interpreter) it gets only the agent's own folders: the script's, the
    working directory, ``PYTHONPATH`` and what the agent added at run time. The standard library,
    site-packages and what their ``.pth`` files add belong to the agent's installation: passed on,
    they would come before the runtime's own packages and undo the isolation that is the point of
    a venv (an agent on numpy 2 would hand its numpy to an env that needs numpy<2).
    """
    paths: list[str] = []
    installation = set() if same_interpreter else _installation()
    for entry in sys.path:
        if entry.endswith(".__path_hook__"):  # setuptools' editable-install finder: the installation's, no folder
            continue
        path = os.path.abspath(entry or os.getcwd())
        if path in paths or _inside(os.path.realpath(path), installation):
            continue
        paths.append(path)
    return paths


def _installation() -> set[str]:
    """The agent interpreter's own folders (real paths): standard library, site-packages, ``.pth`` entries."""
    roots: set[str] = set()
    for scheme_paths in (sysconfig.get_paths(), sysconfig.get_paths(vars={"base": sys.base_prefix})):
        roots.update(scheme_paths[key] for key in ("stdlib", "platstdlib", "purelib", "platlib") if key in scheme_paths)
    version = f"python{sys.version_info[0]}{sys.version_info[1]}.zip"
    roots.update(os.path.join(prefix, "lib", version) for prefix in (sys.prefix, sys.base_prefix))
    site_dirs = list(getattr(site, "getsitepackages", list)())
    if getattr(site, "ENABLE_USER_SITE", False):
        site_dirs.append(site.getusersitepackages())
    roots.update(site_dirs)
    for site_dir in site_dirs:
        roots.update(_pth_entries(site_dir))
    return {os.path.realpath(root) for root in roots}


def _pth_entries(site_dir: str) -> list[str]:
    """The folders the ``.pth`` files of ``site_dir`` add to ``sys.path`` (editable installs among them)."""
    try:
        names = sorted(name for name in os.listdir(site_dir) if name.endswith(".pth"))
    except OSError:
        return []
    entries = []
    for name in names:
        try:
            with open(os.path.join(site_dir, name), encoding="utf-8", errors="replace") as handle:
                lines = handle.read().splitlines()
        except OSError:
            continue
        for line in lines:
            line = line.strip()
            if line and not line.startswith(("#", "import ", "import\t")):
                entries.append(os.path.join(site_dir, line))
    return entries


def _inside(path: str, roots: set[str]) -> bool:
    return any(path == root or path.startswith(root + os.sep) for root in roots)
