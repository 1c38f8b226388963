r"""HSDAG's grouping of a graph by dominant edges, as plain functions, and its results.

Every node keeps its dominant edge (:func:`dominant_edges`: its best-scored incident
edge), the connected components of the dominant edges are the groups
(:func:`parse_groups`, which also splits a graph that would end as one group). The rules
and how the scores are learned are :class:`policies.hsdag.graph_parsing.GraphParsingPool`'s;
its results are a :class:`Grouping` and a :class:`PooledGraph`.
"""
from __future__ import annotations

from typing import NamedTuple, Optional, Tuple

import numpy as np
import scipy.sparse as sp
import torch
from scipy.sparse.csgraph import connected_components
from torch import Tensor

from policies.layers import unique_ids

__all__ = ["Grouping", "PooledGraph", "dominant_edges", "parse_groups", "groups_of_graphs"]


class Grouping(NamedTuple):
    """The learned grouping of one (batched) graph.

    Attributes:
        assignment: ``[N]`` long, group of each node; groups are numbered
            ``0..G-1`` in the order of their first (lowest-index) node.
        num_groups: ``G``.
        node_score: ``[N]`` score of each node's dominant edge (``1`` for a node
            without edges); differentiable w.r.t. the edge scorer.
        edge_score: ``[E]`` score in ``[0, 1]`` of every input edge (without
            gradients: only the dominant edges' scores, ``node_score``, carry them).
        dominant_edge: ``[N]`` long, index into ``edge_index`` of each node's
            dominant edge, ``-1`` for a node without edges; with self-loop
            parsing, ``E + v`` when node ``v`` chose its own loop.
        group_batch: ``[G]`` long, graph of each group (all zeros for one graph).
        partner: ``[N]`` long, with a sampled grouping (``sample_grouping``) the
            node at the other end of each node's sampled dominant edge (``-1``
            without edges), else ``None``.
        partner_logp: ``[N]`` log-probability of each node's partner under the
            current scores (differentiable; ``0`` without edges), or ``None``.
        gate_partner: ``[N]`` long, the node at the other end of each node's
            (noiseless) dominant edge, whose score is its gate (``-1`` without
            edges; the node itself for its own loop). A learner given these back
            (``gate_partner=``) with the sampled assignment scores only those
            edges; ``edge_score`` and ``dominant_edge`` are then ``None``.
    """

    assignment: Tensor
    num_groups: int
    node_score: Tensor
    edge_score: Optional[Tensor]
    dominant_edge: Optional[Tensor]
    group_batch: Tensor
    partner: Optional[Tensor] = None
    partner_logp: Optional[Tensor] = None
    gate_partner: Optional[Tensor] = None


class PooledGraph(NamedTuple):
    """The pooled (group) graph.

    Attributes:
        x: ``[G, H]`` group embeddings: the score-gated mean (or sum) of the
            group's node states, :math:`\\mathbf{C}^{-1}\\mathbf{S}^\\top(\\mathbf{Z} \\odot \\mathbf{n})`.
        edge_index: ``[2, E']`` nonzero entries of
            :math:`\\mathbf{A}' = \\mathbf{S}^\\top\\mathbf{A}\\mathbf{S}` (directed;
            diagonal entries count the edges inside a group); ``None`` when the
            pool was asked not to build it (``pool_edges=False``).
        edge_weight: ``[E']`` the entries' values (numbers of input edges), or ``None``.
        batch: ``[G]`` graph of each group.
    """

    x: Tensor
    edge_index: Optional[Tensor]
    edge_weight: Optional[Tensor]
    batch: Tensor



def dominant_edges(
    edge_index: Tensor, edge_score: Tensor, num_nodes: int, self_loops: bool = False
) -> Tensor:
    """Index of each node's highest-scoring incident edge (``-1`` if it has none).

    Edges count for both endpoints (the graph is read as undirected); self-loops
    are ignored unless ``self_loops`` (then a node may choose its own loop, and
    stays alone unless a neighbour's dominant edge reaches it). Ties go to the
    edge with the lowest index, which also makes the dominant edges a forest (a
    cycle would need a strictly circular tie-break).
    """
    num_edges = edge_index.size(1)
    device = edge_index.device
    src, dst = edge_index
    proper = torch.ones_like(src, dtype=torch.bool) if self_loops else src != dst
    ids = torch.arange(num_edges, device=device)[proper]
    nodes = torch.cat([src[proper], dst[proper]])
    inc = torch.cat([ids, ids])
    score = edge_score.detach()[inc]
    best = torch.full((num_nodes,), -float("inf"), device=device, dtype=score.dtype)
    best = best.scatter_reduce(0, nodes, score, reduce="amax", include_self=True)
    is_best = score == best[nodes]
    dom = torch.full((num_nodes,), num_edges, device=device, dtype=torch.long)
    dom = dom.scatter_reduce(0, nodes[is_best], inc[is_best], reduce="amin", include_self=True)
    return torch.where(dom == num_edges, torch.full_like(dom, -1), dom)


def _components(pairs: Tensor, num_nodes: int) -> Tensor:
    """Connected-component label of every node of the undirected graph ``pairs``."""
    row, col = pairs.detach().cpu().numpy()
    adj = sp.coo_matrix((np.ones(row.size, dtype=np.int8), (row, col)), shape=(num_nodes, num_nodes))
    _, labels = connected_components(adj, directed=False)
    return torch.as_tensor(labels, dtype=torch.long, device=pairs.device)


def _canonical(labels: Tensor, num_nodes: int) -> Tuple[Tensor, Tensor]:
    """Renumbers groups by their first node; returns ``(assignment, first_node [G])``."""
    _, labels = unique_ids(labels)
    num_groups = int(labels.max()) + 1 if num_nodes > 0 else 0
    node_ids = torch.arange(num_nodes, device=labels.device)
    first = torch.full((num_groups,), num_nodes, dtype=torch.long, device=labels.device)
    first = first.scatter_reduce(0, labels, node_ids, reduce="amin", include_self=True)
    order = torch.argsort(first)
    rank = torch.empty_like(order)
    rank[order] = torch.arange(num_groups, device=labels.device)
    return rank[labels], first[order]


def groups_of_graphs(assignment: Tensor, batch: Tensor) -> Tuple[int, Tensor]:
    """``(G, [G] graph of each group)`` of an assignment numbered ``0..G-1``."""
    num_groups = int(assignment.max()) + 1 if assignment.numel() > 0 else 0
    group_batch = torch.zeros(num_groups, dtype=torch.long, device=assignment.device)
    return num_groups, group_batch.scatter_reduce(0, assignment, batch, reduce="amax", include_self=False)


def parse_groups(
    edge_index: Tensor,
    edge_score: Tensor,
    dominant: Tensor,
    batch: Tensor,
    num_graphs: int,
) -> Tensor:
    """Groups = connected components of the dominant edges, never one per connected graph.

    Returns the ``[N]`` assignment, groups numbered by their first node. If a
    graph of ``>= 2`` nodes would end as a single group, its weakest dominant
    edge (lowest score, then lowest index) is dropped until it has two groups.
    """
    num_nodes = batch.numel()
    kept, _ = unique_ids(dominant[dominant >= 0])
    nodes_per_graph = torch.bincount(batch, minlength=num_graphs)
    score = edge_score.detach()
    for _ in range(num_nodes + 1):
        assignment, first = _canonical(_components(edge_index[:, kept], num_nodes), num_nodes)
        groups_per_graph = torch.bincount(batch[first], minlength=num_graphs)
        collapsed = (groups_per_graph == 1) & (nodes_per_graph >= 2)
        if not bool(collapsed.any()):
            return assignment
        kept_graph = batch[edge_index[0, kept]]
        # only an edge between two nodes can be dropped to split a group
        in_collapsed = collapsed[kept_graph] & (edge_index[0, kept] != edge_index[1, kept])
        cand = torch.where(in_collapsed, score[kept], torch.full_like(score[kept], float("inf")))
        weakest = torch.full((num_graphs,), float("inf"), dtype=cand.dtype, device=cand.device)
        weakest = weakest.scatter_reduce(0, kept_graph, cand, reduce="amin", include_self=True)
        is_weakest = in_collapsed & (cand == weakest[kept_graph])
        big = edge_index.size(1)
        drop = torch.full((num_graphs,), big, dtype=torch.long, device=kept.device)
        drop = drop.scatter_reduce(
            0, kept_graph[is_weakest], kept[is_weakest], reduce="amin", include_self=True
        )
        kept = kept[~torch.isin(kept, drop[drop < big])]
    raise RuntimeError("parse_groups did not converge; please report this graph.")  # pragma: no cover
