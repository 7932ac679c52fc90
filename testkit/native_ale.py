"""Breakout through ``presets.atari_vector`` and the same games in ALE's vector env in process, for
tests that compare them: the preset's options and the ``AtariVectorEnv`` settings they stand for,
with short episodes so that every rollout crosses autoresets."""

from __future__ import annotations

from typing import Any

ATARI_VECTOR = "portal_shm.presets:atari_vector"  # a batched entry point: a server's envs in ALE's vector env


def breakout_options(max_episode_steps: int) -> dict[str, Any]:
    """``presets.atari``'s options (what ``atari_vector`` takes) for Breakout episodes of at most
    ``max_episode_steps`` steps, no-ops and FIRE at reset."""
    return {"env_id": "ALE/Breakout-v5", "noop_max": 6, "fire_reset": True, "max_episode_steps": max_episode_steps}


def breakout_in_process(n: int, mode: Any, max_episode_steps: int) -> Any:
    """``n`` games of ``breakout_options(max_episode_steps)`` in one ``AtariVectorEnv`` in this process
    (``mode``: its autoreset mode). ALE's vector env plays 0 to ``noop_max - 1`` no-ops where the
    preset plays 0 to ``noop_max``, and counts frames where the preset counts steps (frame skip 4)."""
    from ale_py.vector_env import AtariVectorEnv

    return AtariVectorEnv(
        "breakout",
        num_envs=n,
        num_threads=1,
        autoreset_mode=mode,
        noop_max=7,
        use_fire_reset=True,
        max_num_frames_per_episode=4 * max_episode_steps,
        repeat_action_probability=0.25,
        reward_clipping=False,
        episodic_life=False,
    )
