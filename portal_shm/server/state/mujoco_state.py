"""The adapter for MuJoCo envs: ``mjSTATE_INTEGRATION`` and the derived fields envs read between steps."""

from __future__ import annotations

from typing import Any

import numpy as np

from .adapter_base import Adapter
from .plain import StateError, _attrs

# MjData fields that mj_forward derives from the state and that envs read between steps (Ant's
# and Humanoid's rewards read body positions before stepping): saved as they were, because after
# ``mj_step`` they describe the last substep's start, which no recomputation from the state gives.
_MUJOCO_DERIVED = (
    "xpos",
    "xquat",
    "xmat",
    "xipos",
    "ximat",
    "xanchor",
    "xaxis",
    "geom_xpos",
    "geom_xmat",
    "site_xpos",
    "site_xmat",
    "cam_xpos",
    "cam_xmat",
    "subtree_com",
    "subtree_linvel",
    "subtree_angmom",
    "cinert",
    "cvel",
    "cacc",
    "cfrc_int",
    "cfrc_ext",
    "ten_length",
    "actuator_length",
    "actuator_velocity",
    "actuator_force",
    "qfrc_actuator",
    "qfrc_passive",
    "qfrc_bias",
    "qfrc_constraint",
    "qacc",
    "sensordata",
    "energy",
)


class MujocoState(Adapter):
    """MuJoCo envs (gymnasium's ``MujocoEnv``: ``model`` and ``data``): ``mjSTATE_INTEGRATION`` is
    everything ``mj_step`` reads (time, qpos, qvel, act, warm start, controls, applied forces,
    mocap, user data, plugin state), so the next step is the original one bit for bit. The fields
    envs read between steps are derived, and saved as they were (``_MUJOCO_DERIVED``)."""

    name = "mujoco"
    packages: tuple = ("mujoco",)

    @staticmethod
    def matches(base: Any) -> bool:
        data = _attrs(base).get("data")
        return (
            type(data).__name__ == "MjData" and type(data).__module__.startswith("mujoco") and "model" in _attrs(base)
        )

    @staticmethod
    def save(base: Any, resets_next: bool) -> Any:
        import mujoco

        spec = mujoco.mjtState.mjSTATE_INTEGRATION
        state = np.empty(mujoco.mj_stateSize(base.model, spec), np.float64)
        mujoco.mj_getState(base.model, base.data, state, spec)
        derived = {name: np.array(getattr(base.data, name)) for name in _MUJOCO_DERIVED if hasattr(base.data, name)}
        return {"integration": state, "derived": derived}

    @staticmethod
    def load(base: Any, payload: Any) -> None:
        import mujoco

        spec = mujoco.mjtState.mjSTATE_INTEGRATION
        state = payload["integration"]
        if state.shape != (mujoco.mj_stateSize(base.model, spec),):
            raise StateError(
                f"a MuJoCo state of {state.shape[0]} numbers does not fit this model's "
                f"{mujoco.mj_stateSize(base.model, spec)}: restore it into an env of the same model"
            )
        mujoco.mj_setState(base.model, base.data, state, spec)
        mujoco.mj_forward(base.model, base.data)  # every derived field consistent, then as saved
        for name, value in payload["derived"].items():
            getattr(base.data, name)[...] = value
