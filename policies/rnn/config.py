"""The settings of :class:`policies.rnn.policy.RNNPlacerNet` (read from an RLModule's
``model_config``; a run's settings hold one as their ``rnn`` section). Imports no torch."""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Mapping, Optional

__all__ = ["RNNPlacerConfig"]


@dataclass(frozen=True)
class RNNPlacerConfig:
    """Settings of :class:`policies.rnn.policy.RNNPlacerNet`.

    Attributes:
        hidden_dim: width of embeddings and LSTM states (the encoder's outputs
            are ``2 * hidden_dim``, one half per direction).
        grouper: place groups of a learned feed-forward grouper (the 2018
            paper) instead of single ops.
        num_groups: groups of the grouper (at most the graph's padded size).
        out_scale: the last layer of the device head and of the grouper start
            at this scale, so the first policy is close to uniform.
    """

    hidden_dim: int = 64
    grouper: bool = False
    num_groups: int = 32
    out_scale: float = 0.01

    def __post_init__(self) -> None:
        if self.hidden_dim < 1 or self.num_groups < 1:
            raise ValueError("hidden_dim and num_groups must be at least 1")

    @classmethod
    def from_model_config(cls, model_config: Optional[Mapping[str, Any]]) -> "RNNPlacerConfig":
        """The settings named in an RLlib ``model_config`` (others are ignored)."""
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in dict(model_config or {}).items() if k in known})
