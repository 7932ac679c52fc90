"""Where an env server looks up named envs: the agent's import path first, and what a miss reports.

A backend that starts servers on the agent's own files (process, venv, micromamba) passes the
agent's import path in the config (``"import_path"``, chosen by ``portal_shm.runtimes.import_path``);
``adopt`` puts it first on ``sys.path``, in the agent's order, as multiprocessing's spawn does for
AsyncVectorEnv's workers, so ``"myenvs:cart"`` and the modules env factories name import here as
they do in the agent (on a remote host the agent is the host: its servers get its path). A runtime
with files of its own (a container, a listener started apart) gets none, and a miss there says so
instead of pointing at the agent's folders.

Module state, as ``sys.path`` itself is: one server process serves one config.
"""

from __future__ import annotations

import os
import sys
from typing import Any, Optional

SHOWN_ENTRIES = 6

_adopted: Optional[list] = None  # the agent's entries this server put on sys.path; None: it passed none


def adopt(entries: Any) -> None:
    """Put the agent's import path entries first on ``sys.path``, keeping the server's own after them."""
    global _adopted
    if not isinstance(entries, (list, tuple)):
        return
    paths = [entry for entry in entries if isinstance(entry, str)]
    sys.path[:] = paths + [entry for entry in sys.path if entry not in paths]
    _adopted = paths


def import_failure(entry_point: str, module_name: str, exc: ImportError) -> str:
    """Why ``module_name`` (of ``entry_point``) did not import, what was searched and what to do."""
    missing = exc.name if isinstance(exc, ModuleNotFoundError) else None
    if missing and (module_name == missing or module_name.startswith(missing + ".")):
        what = f"no module {missing!r}" if missing == module_name else f"no package {missing!r} (of {module_name!r})"
        return f"entry point {entry_point!r}: {what} on the env server's import path ({searched()}); {advice(missing)}"
    if missing:
        return (
            f"entry point {entry_point!r}: importing module {module_name!r} needs {missing!r}, which this runtime lacks "
            f"({exc}): install it in the runtime (a venv's requirements, an image)"
        )
    return f"entry point {entry_point!r}: importing module {module_name!r} failed: {type(exc).__name__}: {exc}"


def advice(module: str) -> str:
    top = module.split(".")[0]
    if _adopted is not None:
        return (
            "the import path of the program that started this server came first (the agent's: its script's "
            f"folder, working directory, PYTHONPATH; on a remote host, the host's): check the name, put {top}.py "
            f"(or a package {top}/) where that program's own 'import {module}' finds it, or install it in the runtime"
        )
    return (
        "this runtime does not share the agent's files (a container, a host, a listener started apart): "
        f"install {top!r} in it (its image or requirements) or put its folder on the runtime's PYTHONPATH"
    )


def searched() -> str:
    """The folders ``sys.path`` holds, in order: the standard library's as one item, the rest up to
    ``SHOWN_ENTRIES``."""
    stdlib = [os.path.realpath(p) for p in (os.path.dirname(os.__file__), sys.base_prefix)]
    shown: list = []
    has_stdlib = False
    for entry in sys.path:
        path = os.path.abspath(entry or os.getcwd())
        real = os.path.realpath(path)
        if "site-packages" not in real and "dist-packages" not in real and real.startswith(stdlib[0]):
            has_stdlib = True
        elif real.endswith(".zip") and real.startswith(stdlib[1] + os.sep):
            has_stdlib = True
        elif path not in shown:
            shown.append(path)
    text = ", ".join(shown[:SHOWN_ENTRIES])
    if len(shown) > SHOWN_ENTRIES:
        text += f" and {len(shown) - SHOWN_ENTRIES} more"
    if has_stdlib:
        text += ", the standard library" if shown else "the standard library"
    return f"searched {text}"
