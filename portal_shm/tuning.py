"""Reading what ``portal-shm tune`` wrote: the ``vector_kwargs`` it picked, checked against the
portal they are about to configure.

A tuning is a layout measured for one env id at one ``num_envs`` on one machine: servers of
another size, another batch or another core count change which layout wins, so a file made for
another env or ``num_envs`` is refused, and one made on a machine with another core count is
applied with a warning. This module reads JSON only; the search itself is ``portal_shm.bench.tune``
(it needs the bench and rich, which ``make_vec`` must not import).
"""

from __future__ import annotations

import json
import os
import warnings
from typing import Any, Optional, Union

from .errors import PortalError

# ``vector_kwargs`` that together say how envs are grouped into servers and batches: they are
# applied together or not at all (``merge_tuning``).
LAYOUT_KEYS = ("envs_per_server", "batch_size")

PathOrDict = Union[str, "os.PathLike[str]", dict]


class TuningError(PortalError, ValueError):
    """A tuning file that cannot configure this portal (another env, another ``num_envs``, not a tuning)."""


def _source(where: Any) -> str:
    return os.fspath(where) if isinstance(where, (str, os.PathLike)) else "the tuning dict"


def check_tuning(
    report: dict, env_id: Optional[str] = None, num_envs: Optional[int] = None, source: str = "the tuning"
) -> dict:
    """The ``vector_kwargs`` of a tune report, after checking it was made for ``env_id`` and
    ``num_envs`` (either None: not checked) and warning when this machine has other cores."""
    kwargs = report.get("vector_kwargs") if isinstance(report, dict) else None
    if not isinstance(kwargs, dict) or "env_id" not in report or "num_envs" not in report:
        raise TuningError(
            f"{source} is not a tuning written by `portal-shm tune` (it needs env_id, num_envs and vector_kwargs): "
            "make one with `portal-shm tune ENV -n N --write tune.json`"
        )
    tuned_id, tuned_n = report["env_id"], report["num_envs"]
    redo = f"run `portal-shm tune {env_id or tuned_id} -n {num_envs or tuned_n} --write FILE` for this portal"
    if env_id is not None and tuned_id != env_id:
        raise TuningError(
            f"{source} was tuned for env {tuned_id!r} (num_envs={tuned_n}), not for {env_id!r}: the best layout "
            f"depends on the env's step cost; {redo}, or pass the tuning of {env_id!r}"
        )
    if num_envs is not None and tuned_n != num_envs:
        raise TuningError(
            f"{source} was tuned for num_envs={tuned_n} of {tuned_id!r}, not num_envs={num_envs}: its servers and "
            f"batches divide {tuned_n} envs; {redo}, or make the portal with num_envs={tuned_n}"
        )
    cores = (report.get("machine") or {}).get("cores")
    here = os.cpu_count()
    if isinstance(cores, int) and here is not None and cores != here:
        warnings.warn(
            f"{source} was tuned on a machine with {cores} cores, this one has {here}: the layout that wins depends "
            f"on the cores (servers per core, who may spin); {redo} here for a layout of this machine",
            UserWarning,
            stacklevel=3,
        )
    return dict(kwargs)


def load_tuning(
    path: Union[str, "os.PathLike[str]"], env_id: Optional[str] = None, num_envs: Optional[int] = None
) -> dict:
    """The ``vector_kwargs`` that ``portal-shm tune --write PATH`` picked, ready for ``make_vec``.

    Pass ``env_id`` and ``num_envs`` of the portal they are for: a file tuned for another env or
    another ``num_envs`` raises ``TuningError`` naming both (``make_vec(tune=PATH)`` passes its
    own). A file tuned on a machine with another core count is returned with a ``UserWarning``.
    """
    source = os.fspath(path)
    try:
        with open(source) as f:
            report = json.load(f)
    except FileNotFoundError:
        raise TuningError(
            f"no tuning file {source}: write one with `portal-shm tune ENV -n N --write {source}`"
        ) from None
    except (OSError, ValueError) as exc:
        raise TuningError(f"cannot read the tuning file {source}: {exc}; rewrite it with `portal-shm tune`") from None
    return check_tuning(report, env_id, num_envs, source)


def resolve_tuning(tune: PathOrDict, env_id: str, num_envs: int) -> dict:
    """``make_vec``'s ``tune=``: a path (``load_tuning``), a tune report as a dict (checked the same
    way), or a ``vector_kwargs`` dict (what ``load_tuning`` returns) taken as it is."""
    if isinstance(tune, dict):
        if "vector_kwargs" in tune:
            return check_tuning(tune, env_id, num_envs, _source(tune))
        return dict(tune)
    if isinstance(tune, (str, os.PathLike)):
        return load_tuning(tune, env_id, num_envs)
    raise TypeError(
        f"tune= takes a path to a `portal-shm tune --write` file or a dict, got {type(tune).__name__}: "
        "pass tune='tune.json'"
    )


def merge_tuning(tuned: dict, explicit: Optional[dict]) -> dict:
    """The tuned ``vector_kwargs`` under the caller's explicit ones (explicit wins).

    ``envs_per_server`` and ``batch_size`` were measured as one layout: when the caller sets one of
    them to another value than the tuning's, the tuning's layout is dropped as a whole (a server
    size tuned for lockstep need not divide the caller's batches); its other settings still apply.
    """
    explicit = dict(explicit or {})
    tuned = dict(tuned)
    if any(key in explicit and explicit[key] != tuned.get(key) for key in LAYOUT_KEYS):
        for key in LAYOUT_KEYS:
            tuned.pop(key, None)
    return {**tuned, **explicit}
