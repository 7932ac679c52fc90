"""What ``presets.atari``'s options mean to ALE's own vector env (ale_py >= 0.10 ``AtariVectorEnv``).

Both sides read it: the env server that hosts a server's Atari envs in ``AtariVectorEnv``
(``server/native_ale.py``), and the agent's envpool drop-in and benchmarks, which ask whether
options map onto it without importing the env side. A pure function of names and numbers.

Python 3.9 syntax: this runs in env runtimes.
"""

from __future__ import annotations

import re
from typing import Any, Dict, Union


def rom_name(env_id: str) -> str:
    """ALE's ROM name of a gymnasium id: ``ALE/MsPacman-v5`` -> ``ms_pacman``."""
    name = env_id.split("/")[-1].rsplit("-", 1)[0]
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def vector_settings(env_id: str, options: Dict[str, Any]) -> Union[Dict[str, Any], str]:
    """``presets.atari``'s options as ``AtariVectorEnv``'s keyword arguments, or why they cannot be.

    Only what means the same in both is mapped: grey frames (AtariVectorEnv stacks RGB frames in
    another layout), no ALE mode or difficulty (it has neither). A lost life: AtariVectorEnv's
    ``episodic_life`` restarts the game at the next reset, which is the preset's
    ``terminal_on_life_loss``, not its (envpool's) ``episodic_life`` that continues the game.
    No-ops: AtariVectorEnv plays 0 to ``noop_max - 1`` single frames at a reset, the preset
    ``noop_min`` to ``noop_max``: mapped where ``noop_min`` is 0. The envpool drop-in's options
    (``envpool_infos``) pass as they are, envpool's values in AtariVectorEnv's reading of them
    (what ALE's vector env given envpool's settings does, as benchmarks compare them)."""
    options = dict(options)
    if not env_id.startswith("ALE/") or not env_id.endswith("-v5"):
        return f"env_id {env_id!r} is not an ALE v5 id"
    if options.pop("episodic_life", False):
        return "episodic_life continues the game after a lost life; AtariVectorEnv's restarts it"
    envpool = bool(options.pop("envpool_infos", False))
    noop_min, noop_max = int(options.pop("noop_min", 0)), int(options.pop("noop_max", 30))
    if not envpool and noop_min != 0:
        return f"noop_min={noop_min} (AtariVectorEnv's no-ops start at 0)"
    if not options.pop("grayscale", True):
        return "RGB frames (AtariVectorEnv stacks them channels-last)"
    size = options.pop("screen_size", 84)
    height, width = (size, size) if isinstance(size, int) else tuple(size)
    max_steps = options.pop("max_episode_steps", None)
    frame_skip = int(options.pop("frame_skip", 4))
    settings = {
        "game": rom_name(env_id),
        "img_height": int(height),
        "img_width": int(width),
        "grayscale": True,
        "stack_num": int(options.pop("stack", 4)),
        "frameskip": frame_skip,
        "maxpool": frame_skip > 1,
        "noop_max": noop_max if envpool else noop_max + 1,
        "episodic_life": bool(options.pop("terminal_on_life_loss", False)),
        "use_fire_reset": bool(options.pop("fire_reset", False)),
        "repeat_action_probability": float(options.pop("repeat_action_probability", 0.25)),
        "full_action_space": bool(options.pop("full_action_space", False)),
        "max_num_frames_per_episode": 108000 if max_steps is None else int(max_steps) * frame_skip,
        "reward_clipping": False,  # clipped here, so that envpool's info["reward"] keeps the game's
    }
    options.pop("reward_clip", None)
    if options:
        return f"options {sorted(options)} have no AtariVectorEnv equivalent"
    return settings
