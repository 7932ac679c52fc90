"""Spaces rebuilt on the agent from the schemas env servers send (``portal_shm.wire.schema``), and a
stand-in for env-side spaces that have no portable description (e.g. MiniGrid's MissionSpace)."""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces
from gymnasium.spaces import Space

from ...wire.schema import MAX_SCHEMA_DEPTH


class RemoteSpace(Space[Any]):
    """The agent-side view of a custom space of the env runtime.

    Its values (strings, numbers, nested lists and dicts, numpy arrays) travel as msgpack beside the
    ring, and a batch of them is a tuple with one value per env, as gymnasium batches custom spaces.
    It cannot sample: only the env runtime knows the real space.
    """

    def __init__(self, name: str, description: str) -> None:
        super().__init__(None, None)
        self.name = name
        self.description = description

    @property
    def is_np_flattenable(self) -> bool:
        return False

    def sample(self, mask: Any = None, probability: Any = None) -> Any:
        raise NotImplementedError(f"{self.name} lives in the env runtime; the agent cannot sample it")

    def contains(self, x: Any) -> bool:
        return True

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RemoteSpace) and (other.name, other.description) == (self.name, self.description)

    def __hash__(self) -> int:
        return hash((self.name, self.description))

    def __repr__(self) -> str:
        return f"RemoteSpace({self.description})"


def schema_to_space(schema: Any, depth: int = 0) -> Any:
    """Rebuild a gymnasium space from an (untrusted) schema; raises ValueError on anything odd."""
    if depth > MAX_SCHEMA_DEPTH:
        raise ValueError("space schema nested too deeply")
    if not isinstance(schema, dict) or not isinstance(schema.get("kind"), str):
        raise ValueError(f"invalid space schema {schema!r:.200}")
    kind = schema["kind"]
    if kind == "Box":
        dtype = np.dtype(schema["dtype"])
        return spaces.Box(low=schema["low"], high=schema["high"], shape=tuple(schema["shape"]), dtype=dtype)
    if kind == "Discrete":
        return spaces.Discrete(int(schema["n"]), start=int(schema["start"]), dtype=np.dtype(schema["dtype"]))
    if kind == "MultiDiscrete":
        return spaces.MultiDiscrete(schema["nvec"], dtype=np.dtype(schema["dtype"]), start=schema["start"])
    if kind == "MultiBinary":
        n = schema["n"]
        return spaces.MultiBinary(n if isinstance(n, int) else list(n))
    if kind == "Dict":
        return spaces.Dict({key: schema_to_space(sub, depth + 1) for key, sub in schema["spaces"]})
    if kind == "Tuple":
        return spaces.Tuple([schema_to_space(sub, depth + 1) for sub in schema["spaces"]])
    if kind == "Text":
        charset = schema.get("charset")
        kwargs: dict[str, Any] = {"min_length": int(schema["min_length"])}
        if charset is not None:
            kwargs["charset"] = charset
        return spaces.Text(int(schema["max_length"]), **kwargs)
    if kind == "Graph":
        edge = schema.get("edge_space")
        return spaces.Graph(
            schema_to_space(schema["node_space"], depth + 1), None if edge is None else schema_to_space(edge, depth + 1)
        )
    if kind == "Sequence":
        return spaces.Sequence(schema_to_space(schema["space"], depth + 1), stack=bool(schema.get("stack")))
    if kind == "OneOf":
        return spaces.OneOf([schema_to_space(sub, depth + 1) for sub in schema["spaces"]])
    if kind == "Opaque":
        return RemoteSpace(str(schema.get("name")), str(schema.get("repr")))
    raise ValueError(f"unknown space kind {kind!r}")
