"""The floor under HSDAG's node-move probabilities (``HSDAGConfig.move_floor``), as plain
torch: :class:`policies.hsdag.policy.HSDAGNet` applies it to its move logits, and
:mod:`policies.hsdag.move_distribution` (RLlib's action distribution of node moves)
re-exports it, so the network imports without RLlib."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = ["floored_logits"]


def floored_logits(move_logits: Tensor, floor: Tensor | float) -> Tensor:
    """The logits of ``(1 - e) * sigmoid(move_logits) + e`` with ``e = floor`` (per node or
    one value in ``[0, 1)``): a move probability that never falls below ``e``.

    Computed in log space, ``log q' - log(1 - q')`` with ``1 - q' = (1 - e)(1 - q)``, so
    it stays finite and differentiable for any logit.
    """
    e = torch.as_tensor(floor, dtype=move_logits.dtype, device=move_logits.device).clamp(1e-12, 1 - 1e-6)
    log_keep = torch.log1p(-e)
    log_move = torch.logaddexp(log_keep + F.logsigmoid(move_logits), torch.log(e))
    return log_move - (log_keep + F.logsigmoid(-move_logits))
