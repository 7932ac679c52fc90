"""portal-env's env side for the benchmark, run as a local process (no Docker):
``python -m portal_shm.bench.portal_env_server PORT TARGET KWARGS_JSON``.

portal-env's server (``portal_env.EnvSidePortal`` on danijar's ``portal``) spawns a batcher
process that re-imports the main module, hence the ``__main__`` guard and a module-level factory.
"""

from __future__ import annotations

import json
import sys

TARGET: str = ""
KWARGS: dict = {}


def make_env(*args, **kwargs):  # portal-env passes its create() arguments through
    from portal_shm.server.envs import make_env as make

    return make(TARGET, {**KWARGS, **kwargs})


def main(argv: list) -> None:
    global TARGET, KWARGS
    port, TARGET, kwargs = int(argv[0]), argv[1], json.loads(argv[2])
    KWARGS = {k: tuple(v) if isinstance(v, list) else v for k, v in kwargs.items()}
    from portal_env import EnvSidePortal

    EnvSidePortal(make_env, port=port).start()


if __name__ == "__main__":
    main(sys.argv[1:])
