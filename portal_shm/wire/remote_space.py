"""A stand-in for an env-side space that has no portable description (e.g. MiniGrid's MissionSpace)."""

from __future__ import annotations

from typing import Any

from gymnasium.spaces import Space


class RemoteSpace(Space):
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
