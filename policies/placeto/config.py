"""The settings of :class:`policies.placeto.policy.PlacetoNet` (read from an RLModule's
``model_config``; a run's settings hold one as their ``placeto`` section). Imports no torch."""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Mapping

__all__ = ["PlacetoConfig"]


@dataclass(frozen=True)
class PlacetoConfig:
    """Settings of :class:`policies.placeto.policy.PlacetoNet`.

    Attributes:
        hidden_dim: width ``H`` of every embedding.
        rounds: message-passing rounds ``K`` in each direction (the paper's code: 8).
    """

    hidden_dim: int = 64
    rounds: int = 8

    def __post_init__(self) -> None:
        if self.hidden_dim < 1 or self.rounds < 0:
            raise ValueError("hidden_dim must be at least 1 and rounds 0 or more")

    @classmethod
    def from_model_config(cls, model_config: Mapping[str, Any] | None) -> "PlacetoConfig":
        """The settings named in an RLlib ``model_config`` (others are ignored)."""
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in (model_config or {}).items() if k in known})
