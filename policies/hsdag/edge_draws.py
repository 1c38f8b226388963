"""Drawing each node's dominant edge: the grouping of Graph Parsing as a sampled action.

:func:`sample_partners` lets every node draw one incident edge from the softmax
of the edges' score logits at a temperature (Gumbel-max, independent per
node); :func:`partner_logp` gives the log-probability of given draws under
(possibly updated) logits, so a policy gradient reaches the edge scorer. A
draw is kept as the node at the other end of the edge (its *partner*), which
survives padding and batching; parallel edges to one partner add up. Used by
:class:`policies.hsdag.graph_parsing.GraphParsingPool` with ``sample_grouping``.
"""
from __future__ import annotations

from typing import Tuple

import torch
from torch import Tensor

__all__ = ["sample_partners", "partner_logp"]


def _incidences(edge_index: Tensor, self_loops: bool) -> Tuple[Tensor, Tensor, Tensor]:
    """``(node, other end, edge id)`` of every (node, incident edge) pair, the graph
    read as undirected; a self-loop counts once, and only with ``self_loops``."""
    src, dst = edge_index
    ids = torch.arange(edge_index.size(1), device=edge_index.device)
    proper = src != dst
    loop = ~proper if self_loops else torch.zeros_like(proper)
    first = proper | loop
    node = torch.cat([src[first], dst[proper]])
    other = torch.cat([dst[first], src[proper]])
    return node, other, torch.cat([ids[first], ids[proper]])


def _log_softmax_per_node(values: Tensor, node: Tensor, num_nodes: int) -> Tensor:
    """``values`` (one per incidence) minus the log-sum-exp over their node's incidences."""
    top = torch.full((num_nodes,), -float("inf"), dtype=values.dtype, device=values.device)
    top = top.scatter_reduce(0, node, values.detach(), reduce="amax", include_self=True)
    shifted = values - top[node]
    total = torch.zeros(num_nodes, dtype=values.dtype, device=values.device)
    total = total.index_add(0, node, torch.exp(shifted))
    return shifted - torch.log(total[node])


def sample_partners(edge_index: Tensor, logits: Tensor, num_nodes: int, temperature: float,
                    self_loops: bool = False) -> Tuple[Tensor, Tensor]:
    """Every node draws its dominant edge from ``softmax(logit / temperature)`` over
    its incident edges (Gumbel-max, independent per node).

    Returns ``(dominant [N] edge ids, partner [N] node ids)``, ``-1`` for a node
    without edges (see :func:`partner_logp` for the log-probability).
    """
    node, other, inc = _incidences(edge_index, self_loops)
    uniform = torch.rand(node.numel(), device=logits.device).clamp(1e-10, 1.0 - 1e-7)
    noisy = logits.detach()[inc] / max(float(temperature), 1e-6) - torch.log(-torch.log(uniform))
    best = torch.full((num_nodes,), -float("inf"), dtype=noisy.dtype, device=noisy.device)
    best = best.scatter_reduce(0, node, noisy, reduce="amax", include_self=True)
    pick = torch.arange(node.numel(), device=node.device)
    chosen = torch.full((num_nodes,), node.numel(), dtype=torch.long, device=node.device)
    is_best = noisy == best[node]
    chosen = chosen.scatter_reduce(0, node[is_best], pick[is_best], reduce="amin", include_self=True)
    has = chosen < node.numel()
    safe = chosen.clamp(max=max(node.numel() - 1, 0))
    none = torch.full_like(chosen, -1)
    if node.numel() == 0:
        return none, none
    return torch.where(has, inc[safe], none), torch.where(has, other[safe], none)


def partner_logp(edge_index: Tensor, logits: Tensor, partner: Tensor, temperature: float,
                 self_loops: bool = False) -> Tensor:
    """``[N]`` log-probability that each node drew an edge to ``partner`` under
    :func:`sample_partners` with these ``logits`` (parallel edges to the same
    partner add up); ``0`` where ``partner`` is ``-1``. Differentiable in ``logits``."""
    num_nodes = partner.numel()
    node, other, inc = _incidences(edge_index, self_loops)
    out = torch.zeros(num_nodes, dtype=logits.dtype, device=logits.device)
    if node.numel() == 0:
        return out
    lp = _log_softmax_per_node(logits[inc] / max(float(temperature), 1e-6), node, num_nodes)
    match = other == partner[node]
    prob = torch.zeros(num_nodes, dtype=logits.dtype, device=logits.device)
    prob = prob.index_add(0, node[match], torch.exp(lp[match]))
    return torch.where(partner >= 0, torch.log(prob.clamp_min(1e-30)), out)
