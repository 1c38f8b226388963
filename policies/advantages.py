"""The advantage estimators REINFORCE trains with (see :mod:`policies.reinforce`).

Importing this module imports nothing heavy (torch is imported when
:func:`advantages` runs), so settings can be checked against :data:`ADVANTAGES`
before a run starts.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Literal, get_args

if TYPE_CHECKING:
    import torch

__all__ = ["ADVANTAGES", "ELITE_FRACTION", "REPLAYS", "advantages"]

#: advantage estimators of :func:`advantages` (described in :mod:`policies.reinforce`)
Advantage = Literal["rank", "normalized", "centered", "elite"]
ADVANTAGES: tuple[str, ...] = get_args(Advantage)
#: the fraction of a batch that ``"elite"`` advantages train on
ELITE_FRACTION = 0.25
#: which earlier episodes an update replays (described in :mod:`policies.reinforce`)
Replay = Literal["elite", "recent"]
REPLAYS: tuple[str, ...] = get_args(Replay)


def _centred_ranks(values: torch.Tensor) -> torch.Tensor:
    """Ranks of ``values`` (1-D) mapped to ``[-0.5, 0.5]``; tied values share their mean rank."""
    import torch

    n = values.numel()
    if n < 2:
        return torch.zeros_like(values)
    sorted_vals, order = torch.sort(values)
    _, tie, counts = torch.unique_consecutive(sorted_vals, return_inverse=True, return_counts=True)
    position = torch.arange(n, dtype=values.dtype, device=values.device)
    mean_position = torch.zeros(counts.numel(), dtype=values.dtype, device=values.device)
    mean_position = mean_position.scatter_add_(0, tie, position) / counts.to(values.dtype)
    ranks = torch.empty_like(values)
    ranks[order] = mean_position[tie]
    return ranks / (n - 1) - 0.5


def advantages(rewards: torch.Tensor, mask: torch.Tensor, kind: str = "rank") -> torch.Tensor:
    """Per-placement advantages of a batch (the estimators are described in :mod:`policies.reinforce`).

    Args:
        rewards: rewards of any shape (e.g. ``[B, T]``).
        mask: same shape, 1 for real steps and 0 for padding (padding gets 0).
        kind: one of :data:`ADVANTAGES`.
    """
    import torch

    if kind not in ADVANTAGES:
        raise ValueError(f"unknown advantages {kind!r}; choose one of {', '.join(ADVANTAGES)}")
    valid = mask > 0.5
    r = rewards[valid]
    out = torch.zeros_like(rewards)
    if r.numel() == 0:
        return out
    if kind == "elite":
        k = max(1, int(round(ELITE_FRACTION * r.numel())))
        threshold = torch.topk(r, k).values.min()
        out[valid] = (r >= threshold).to(rewards.dtype)
        return out.detach()
    if kind == "rank":
        a = _centred_ranks(r)
    else:
        a = r - r.mean()
    if kind in ("rank", "normalized"):
        std = torch.sqrt((a**2).mean())
        a = a / (std + 1e-8)
    out[valid] = a
    return out.detach()
