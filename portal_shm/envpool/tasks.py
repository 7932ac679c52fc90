"""envpool's task ids and options, and what each becomes here: a preset, its env id, its kwargs."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

# envpool's Atari options and their defaults (envpool/atari/atari_env.h, and its make()).
ATARI_DEFAULTS: dict[str, Any] = {
    "max_episode_steps": 27000,
    "stack_num": 4,
    "frame_skip": 4,
    "noop_max": 30,
    "zero_discount_on_life_loss": False,
    "episodic_life": False,
    "reward_clip": False,
    "use_fire_reset": True,
    "img_height": 84,
    "img_width": 84,
    "mode": -1,
    "difficulty": -1,
    "full_action_space": False,
    "repeat_action_probability": 0.0,
    "use_inter_area_resize": True,
    "gray_scale": True,
}
# envpool's options of every task (the pool's own); gym_reset_return_info is the gym type's.
COMMON_DEFAULTS: dict[str, Any] = {
    "num_threads": 0,
    "max_num_players": 1,
    "thread_affinity_offset": -1,
    "gym_reset_return_info": False,
}
VIZDOOM_DEFAULTS: dict[str, Any] = {"img_height": 84, "img_width": 84, "stack_num": 4, "frame_skip": 4}
# envpool's ViZDoom options that the scenarios' own .cfg files decide in gymnasium's ViZDoom.
VIZDOOM_CFG_OPTIONS = (
    "max_episode_steps",
    "episodic_life",
    "use_combined_action",
    "force_speed",
    "lmp_save_dir",
    "weapon_duration",
    "reward_config",
    "selected_weapon_reward_config",
    "delta_button_config",
    "cfg_path",
    "wad_path",
    "vzd_path",
    "iwad_path",
    "game_args",
    "map_id",
    "use_inter_area_resize",
)
# envpool's ViZDoom task -> the id gymnasium's ViZDoom registers for the same scenario.
VIZDOOM_TASKS = {
    "Basic-v1": "VizdoomBasic-v1",
    "BasicAudio-v1": "VizdoomBasicAudio-v1",
    "BasicNotifications-v1": "VizdoomBasicNotifications-v1",
    "DeadlyCorridor-v1": "VizdoomDeadlyCorridor-v1",
    "Deathmatch-v1": "VizdoomDeathmatch-v1",
    "DefendTheCenter-v1": "VizdoomDefendCenter-v1",
    "DefendTheLine-v1": "VizdoomDefendLine-v1",
    "HealthGathering-v1": "VizdoomHealthGathering-v1",
    "HealthGatheringSupreme-v1": "VizdoomHealthGatheringSupreme-v1",
    "MyWayHome-v1": "VizdoomMyWayHome-v1",
    "PredictPosition-v1": "VizdoomPredictPosition-v1",
    "TakeCover-v1": "VizdoomTakeCover-v1",
}
VIZDOOM_UNMAPPED = frozenset(
    {
        "D1Basic",
        "D2Navigation",
        "D3Battle",
        "D4Battle2",
        "Cig",
        "MultiDuel",
        "RocketBasic",
        "SimplerBasic",
        "VizdoomCustom",
    }
)
MUJOCO_NAMES = (
    "Ant",
    "HalfCheetah",
    "Hopper",
    "Humanoid",
    "HumanoidStandup",
    "InvertedDoublePendulum",
    "InvertedPendulum",
    "Pusher",
    "Reacher",
    "Swimmer",
    "Walker2d",
)
# Why an envpool option with a value other than its default cannot be honoured here.
REFUSED_VALUES = {
    "zero_discount_on_life_loss": "it changes only the discount of env_type='dm', which gym and gymnasium do not return",
    "use_inter_area_resize": "the preset resizes by exact area averaging (INTER_AREA's footprints) only",
    "max_num_players": "portal-shm steps single-player envs",
    "thread_affinity_offset": "env servers are not pinned to cores; drop the option (taskset the agent if needed)",
}
ATARI_INFO_DTYPES = {"lives": np.int32, "reward": np.float32, "terminated": np.int32, "elapsed_step": np.int32}


@dataclasses.dataclass(frozen=True)
class Task:
    """What an envpool task id becomes here: the preset, its env id and the options' defaults."""

    task_id: str
    family: str  # "atari" or "vizdoom"
    env_id: str  # the id the preset makes inside the runtime
    defaults: dict


def task(task_id: str) -> Task:
    """The preset behind envpool's ``task_id``, or an error saying what to use for it."""
    name, _, version = task_id.rpartition("-")
    if task_id in VIZDOOM_TASKS:
        return Task(task_id, "vizdoom", VIZDOOM_TASKS[task_id], dict(VIZDOOM_DEFAULTS))
    if name in VIZDOOM_UNMAPPED:
        raise ValueError(
            f"envpool task {task_id!r} has no scenario in gymnasium's ViZDoom; mapped ViZDoom tasks: "
            f"{', '.join(VIZDOOM_TASKS)} (or portal_shm.make_vec('portal_shm.presets:vizdoom', n, env_id=...) "
            "with your own scenario)"
        )
    if name in MUJOCO_NAMES:
        raise ValueError(
            f"envpool's MuJoCo task {task_id!r} is not mapped: its options and infos are envpool's own; make "
            f"gymnasium's {task_id} with portal_shm.make_vec({task_id!r}, n) (backend='docker', "
            "image='portal-shm/mujoco' where MuJoCo is not installed)"
        )
    if version == "v5" and name.isidentifier() and name[:1].isupper():
        return Task(task_id, "atari", f"ALE/{name}-v5", dict(ATARI_DEFAULTS))
    raise ValueError(
        f"envpool task {task_id!r} is not mapped: portal_shm.envpool knows envpool's Atari ids (Pong-v5, "
        f"Breakout-v5, ...) and the ViZDoom tasks {', '.join(VIZDOOM_TASKS)}; any gymnasium id runs with "
        f"portal_shm.make_vec(id, n)"
    )


def preset_kwargs(spec: Task, options: dict) -> dict:
    """envpool's options of ``spec`` (defaults filled in) as the preset's keyword arguments."""
    if spec.family == "vizdoom":
        return {
            "env_id": spec.env_id,
            "size": (options["img_height"], options["img_width"]),
            "stack": options["stack_num"],
            "frame_skip": options["frame_skip"],
            "grayscale": False,  # envpool's ViZDoom frames are RGB
        }
    if options["noop_max"] < 1:
        raise ValueError(f"noop_max={options['noop_max']}: envpool draws 1 to noop_max no-ops, so noop_max >= 1")
    kwargs = {
        "env_id": spec.env_id,
        "stack": options["stack_num"],
        "frame_skip": options["frame_skip"],
        "noop_min": 1,
        "noop_max": options["noop_max"],
        "screen_size": (options["img_height"], options["img_width"]),
        "grayscale": options["gray_scale"],
        "episodic_life": options["episodic_life"],
        "reward_clip": options["reward_clip"],
        "fire_reset": options["use_fire_reset"],
        "max_episode_steps": options["max_episode_steps"],
        "repeat_action_probability": float(options["repeat_action_probability"]),
        "full_action_space": options["full_action_space"],
        "envpool_infos": True,
    }
    for key in ("mode", "difficulty"):
        if options[key] != -1:  # -1: the game's default
            kwargs[key] = options[key]
    return kwargs
