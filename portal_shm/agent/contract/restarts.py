"""What a restarted env reports and the seed it gets: the same rules on every portal kind."""

from __future__ import annotations

from typing import Any, Optional

import numpy as np


def restart_seed(seed: Optional[int], restarts: int) -> Optional[int]:
    """The seed a restarted env is reset with: derived from its last seed and its restart count."""
    if seed is None:
        return None
    return int(np.random.SeedSequence([int(seed) % 2**64, restarts]).generate_state(1)[0])


def restart_infos(envs: list[int], cause: Optional[BaseException], final: dict[int, Any]) -> dict[int, dict[str, Any]]:
    """Each env's infos of the step that ended its episode by a restart (``final``: SAME_STEP's
    last observations), the same on every portal kind: ``env_restarted`` and ``env_failure``."""
    first_line = str(cause).splitlines()[0][:500] if cause is not None else ""
    out: dict[int, dict[str, Any]] = {}
    for i in envs:
        out[i] = {"env_restarted": True, "env_failure": first_line}
        if i in final:
            out[i].update({"final_obs": final[i], "final_info": {}})
    return out
