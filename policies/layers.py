"""Small building blocks the placement networks share."""
from __future__ import annotations

from torch import nn

__all__ = ["mlp", "reset_sequential"]


def mlp(in_dim: int, hidden_dim: int, out_dim: int, num_layers: int) -> nn.Sequential:
    """``num_layers`` linear layers with ReLU between them (none after the last)."""
    dims = [in_dim] + [hidden_dim] * (num_layers - 1) + [out_dim]
    layers: list[nn.Module] = []
    for i in range(num_layers):
        layers.append(nn.Linear(dims[i], dims[i + 1]))
        if i < num_layers - 1:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


def reset_sequential(seq: nn.Module) -> None:
    for m in seq.modules():
        if isinstance(m, (nn.Linear, nn.LayerNorm)):
            m.reset_parameters()
