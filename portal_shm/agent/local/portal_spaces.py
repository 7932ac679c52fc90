"""A portal's spaces, from what its env servers announced: checked equal (or compatible) across envs.

gymnasium's rules for ``observation_mode`` ("same", "different" or a pair of spaces) and equal
action spaces, with its error texts, applied to the schemas the servers sent in their hellos.
"""

from __future__ import annotations

from typing import Any, NamedTuple, Optional, Union

from gymnasium.spaces import Space
from gymnasium.vector.utils import batch_differing_spaces, batch_space

from ...wire.protocol import packb
from ...wire.schema import has_opaque, is_fixed, leaf_shape_dtype, leaves, space_to_schema
from ..contract.spaces import schema_to_space
from ..contract.validate import space_from_schema
from .env_fns import local_spaces

ObservationMode = Union[str, tuple[Space[Any], Space[Any]]]


class PortalSpaces(NamedTuple):
    obs_schema: dict[str, Any]
    act_schema: dict[str, Any]
    single_observation_space: Space[Any]
    single_action_space: Space[Any]
    observation_space: Space[Any]  # batched over every env
    action_space: Space[Any]


def check_observation_mode(mode: Any) -> None:
    """``observation_mode`` as gymnasium's vector envs take it, with their errors."""
    if not (mode in ("same", "different") or (isinstance(mode, tuple) and len(mode) == 2)):
        raise ValueError(
            "Invalid `observation_mode`, expected: 'same' or 'different' or tuple of single and batch "
            f"observation space, actual got {mode}"
        )
    if isinstance(mode, tuple) and not all(isinstance(s, Space) for s in mode):
        raise TypeError(
            f"Expected both elements of observation_mode to be Spaces, got {type(mode[0])} and {type(mode[1])}"
        )


def _layout_of(schema: dict[str, Any]) -> list[tuple[str, ...]]:
    """What the ring needs of a space: each leaf's kind, shape and dtype, bounds aside."""
    return [
        (leaf["kind"],) + (tuple(map(str, leaf_shape_dtype(leaf))) if is_fixed(leaf) else ())
        for _, leaf in leaves(schema)
    ]


def portal_spaces(
    obs_schemas: list[Any], act_schemas: list[Any], mode: ObservationMode, local_factory: Optional[Any]
) -> PortalSpaces:
    """The spaces of a portal whose envs announced these schemas (untrusted: checked first).

    ``local_factory``: in the env_fns form, the first factory, whose own spaces replace those
    the wire cannot describe (custom spaces).
    """
    obs_schema, act_schema = obs_schemas[0], act_schemas[0]
    single_obs = space_from_schema(obs_schema, "env 0's observation space")
    single_act = space_from_schema(act_schema, "env 0's action space")
    if local_factory is not None and (has_opaque(obs_schema) or has_opaque(act_schema)):
        local = local_spaces(local_factory)
        if local is not None:
            single_obs, single_act = local
    if isinstance(mode, tuple):
        single_obs = mode[1]
        obs_schema = space_to_schema(mode[1])
    for i, (obs, act) in enumerate(zip(obs_schemas, act_schemas)):
        if mode != "same" and _layout_of(obs) != _layout_of(obs_schema):
            raise RuntimeError(
                f"VectorPortal(..., observation_mode='different' or custom space) however the sub-environment's "
                f"observation spaces do not share a common shape and dtype: env {i} has {schema_to_space(obs)}, "
                f"expected the layout of {single_obs}"
            )
        if mode == "same" and packb(obs) != packb(obs_schema):
            raise RuntimeError(
                "VectorPortal(..., observation_mode='same') however some of the sub-environments observation "
                f"spaces are not equivalent: env {i} has {schema_to_space(obs)}, env 0 has {single_obs}. If this "
                "is intentional, use `observation_mode='different'` instead (spaces of one shape and dtype with "
                "other bounds)."
            )
        if packb(act) != packb(act_schema):
            raise RuntimeError(
                f"Some environments have an action space different from `{single_act}`: env {i} has "
                f"{schema_to_space(act)}. In order to batch actions, the action spaces from all environments "
                "must be equal."
            )
    num_envs = len(obs_schemas)
    if isinstance(mode, tuple):
        observation_space = mode[0]
    elif mode == "different":
        observation_space = batch_differing_spaces([schema_to_space(obs) for obs in obs_schemas])
    else:
        observation_space = batch_space(single_obs, num_envs)
    return PortalSpaces(
        obs_schema, act_schema, single_obs, single_act, observation_space, batch_space(single_act, num_envs)
    )
