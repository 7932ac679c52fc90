"""The entry points ``portal_shm.server.example_envs:NullEnv`` ... that tests, docs, images and
hosts' ``--entry-points 'portal_shm.server.example_envs:*'`` name: the envs live in
``portal_shm.example_envs`` (split by what they are for), apart from the server's code; this
module only re-exports them. The server never imports it: a runtime that runs these envs has
gymnasium, which the env server itself does not need.
"""

from __future__ import annotations

from ..example_envs import *  # noqa: F403  (every env, under the names these entry points use)
from ..example_envs import __all__ as __all__
from ..example_envs.hostile import own_server as _own_server  # noqa: F401  (its name before the move)
