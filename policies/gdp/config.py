"""The settings of :class:`policies.gdp.policy.GDPNet` (read from an RLModule's
``model_config``; a run's settings hold one as their ``gdp`` section). Imports no torch."""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Mapping

__all__ = ["GDPConfig"]


@dataclass(frozen=True)
class GDPConfig:
    """Settings of :class:`policies.gdp.policy.GDPNet`.

    Attributes:
        hidden_dim: width ``H`` of every embedding.
        sage_layers: GraphSAGE rounds.
        attention_layers: layers of the segment-recurrent placer.
        heads: attention heads (must divide ``hidden_dim``).
        segment_len: nodes per segment ``S`` of the placer.
        superposition: condition the placer on the graph embedding (FiLM).
    """

    hidden_dim: int = 64
    sage_layers: int = 3
    attention_layers: int = 2
    heads: int = 4
    segment_len: int = 128
    superposition: bool = True

    def __post_init__(self) -> None:
        if min(self.hidden_dim, self.heads, self.segment_len) < 1 or self.sage_layers < 0 \
                or self.attention_layers < 0:
            raise ValueError("hidden_dim, heads and segment_len must be at least 1, "
                             "sage_layers and attention_layers 0 or more")
        if self.hidden_dim % self.heads:
            raise ValueError(f"heads ({self.heads}) must divide hidden_dim ({self.hidden_dim})")

    @classmethod
    def from_model_config(cls, model_config: Mapping[str, Any] | None) -> "GDPConfig":
        """The settings named in an RLlib ``model_config`` (others are ignored)."""
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in (model_config or {}).items() if k in known})
