"""What a benchmark steps: a scenario names an env and how every system can make it.

``null:AxBxC`` is ``portal_shm.server.example_envs.NullEnv`` returning one preallocated uint8 frame of
that shape (pure transport cost); ``training:ALE/<Game>-v5`` is the game as people train it
(envpool's Atari defaults: 84x84 grey, frame skip 4 with max-pool, stack 4, FIRE and no-ops at
reset, no sticky actions), which portals host in ALE's own vector env (``presets.atari_vector``)
and the in-process systems make per env (``presets.atari``); anything else is a gymnasium id (``ALE/Pong-v5``,
``VizdoomBasic-v1``: plugin packages are imported as the env servers do) or an entry point
``package.module:callable``, the user's own env.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

NULL_PREFIX = "null:"
NULL_ENTRY_POINT = "portal_shm.server.example_envs:NullEnv"
TRAINING_PREFIX = "training:"
TRAINING_ENTRY_POINT = "portal_shm.presets:atari_vector"  # a server's games in ALE's vector env
TRAINING_PER_ENV = "portal_shm.presets:atari"  # the same games one by one (in-process systems)
# envpool's Atari defaults in the presets' words (what portal_shm.envpool passes them).
TRAINING_KWARGS = {
    "stack": 4,
    "frame_skip": 4,
    "noop_min": 1,
    "noop_max": 30,
    "screen_size": 84,
    "grayscale": True,
    "fire_reset": True,
    "repeat_action_probability": 0.0,
    "max_episode_steps": 27000,
    "envpool_infos": True,
}
# Scenario prefix -> the image whose runtime serves it on the docker backend.
DOCKER_IMAGES = (
    ("ALE/", "portal-shm/ale"),
    (TRAINING_PREFIX, "portal-shm/ale"),
    ("Vizdoom", "portal-shm/vizdoom"),
    (NULL_PREFIX, "portal-shm/ale"),
)
_ID = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_\-./]*$")
_ENTRY_POINT = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")
_ALE_V5 = re.compile(r"^ALE/([A-Za-z0-9]+)-v5$")


class ScenarioError(ValueError):
    """A scenario argument that names no env the harness can make."""


@dataclass(frozen=True)
class Scenario:
    """One env to benchmark. ``target`` and ``kwargs`` are what ``portal_shm.server.envs.make_env`` and
    ``portal_shm.make_vec`` take: a registered id or an entry point, plus constructor kwargs."""

    name: str
    target: str
    kwargs: dict = field(default_factory=dict, hash=False, compare=False)
    shape: Optional[tuple] = None  # set for null scenarios
    env_target: Optional[str] = None  # what in-process systems make one env with, when not ``target``

    @property
    def is_null(self) -> bool:
        return self.shape is not None

    @property
    def is_training(self) -> bool:
        return self.name.startswith(TRAINING_PREFIX)

    @property
    def is_game(self) -> bool:
        """Anything but the null env: raw single-process speed and the N-core ceiling apply."""
        return self.shape is None

    def env_fn(self) -> Callable[[], Any]:
        """A picklable-enough thunk making one env in this process (for Sync/Async/raw loops)."""
        target, kwargs = self.env_target or self.target, dict(self.kwargs)

        def make() -> Any:
            from portal_shm.server.envs import make_env

            return make_env(target, kwargs)

        return make

    def docker_image(self, override: Optional[str] = None) -> Optional[str]:
        """The image serving this scenario on the docker backend: ``override``, else a known one."""
        if override:
            return override
        return next((image for prefix, image in DOCKER_IMAGES if self.name.startswith(prefix)), None)

    def envpool_task(self) -> Optional[str]:
        """envpool's id for the same game (``ALE/Pong-v5`` -> ``Pong-v5``), None where it has none."""
        match = _ALE_V5.match(self.name[len(TRAINING_PREFIX) :] if self.is_training else self.name)
        return f"{match.group(1)}-v5" if match else None


def parse_scenario(text: str) -> Scenario:
    """``null:210x160x3`` (any shape of positive sizes), a gymnasium id, or ``module:callable``."""
    text = text.strip()
    if text.startswith(NULL_PREFIX):
        dims = text[len(NULL_PREFIX) :].lower().split("x")
        if not all(d.isdigit() and int(d) > 0 for d in dims):
            raise ScenarioError(
                f"bad null scenario {text!r}: expected null:AxBxC with positive integer sizes, "
                "e.g. null:210x160x3 or null:84x84x4"
            )
        shape = tuple(int(d) for d in dims)
        return Scenario(text, NULL_ENTRY_POINT, {"shape": shape}, shape)
    if text.startswith(TRAINING_PREFIX):
        game = text[len(TRAINING_PREFIX) :]
        if not _ALE_V5.match(game):
            raise ScenarioError(
                f"bad training scenario {text!r}: expected training:ALE/<Game>-v5, e.g. training:ALE/Pong-v5"
            )
        kwargs = {"env_id": game, **TRAINING_KWARGS}
        return Scenario(text, TRAINING_ENTRY_POINT, kwargs, env_target=TRAINING_PER_ENV)
    if ":" in text:
        if not _ENTRY_POINT.match(text):
            raise ScenarioError(f"bad entry point {text!r}: expected package.module:callable")
        return Scenario(text, text)
    if not _ID.match(text):
        raise ScenarioError(
            f"bad scenario {text!r}: expected null:AxBxC, a gymnasium id (ALE/Pong-v5) "
            "or an entry point package.module:callable"
        )
    return Scenario(text, text)


def parse_scenarios(texts: list) -> list:
    """Parse every scenario, keeping the order and dropping repeats."""
    scenarios = [parse_scenario(t) for t in texts]
    return list({s.name: s for s in scenarios}.values())
