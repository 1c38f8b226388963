r"""Graph Parsing Network pooling: HSDAG's learned grouping of a graph.

From `"Graph Parsing Networks" <https://openreview.net/forum?id=hv3SklibkL>`_
(Song et al., ICLR 2024) as HSDAG (Duan et al., NeurIPS 2024) uses it: edges
are scored, every node keeps its dominant edge, and the connected components
of the dominant edges are the groups, so their number is learned. See
:class:`GraphParsingPool` for the rules, :mod:`policies.hsdag.grouping` for the parsing
itself and :mod:`policies.hsdag.policy` for how the policy uses it.
"""
from __future__ import annotations

from typing import Optional, Tuple

import torch
from torch import Tensor, nn
from torch_geometric.utils import coalesce, scatter

from policies.hsdag.config import POOLINGS
from policies.hsdag.edge_draws import partner_logp, sample_partners
from policies.hsdag.grouping import (Grouping, PooledGraph, dominant_edges, groups_of_graphs,
                                     parse_groups)
from policies.layers import mlp, reset_sequential, unique_ids

__all__ = ["POOLINGS", "Grouping", "PooledGraph", "GraphParsingPool", "dominant_edges",
           "parse_groups"]


class GraphParsingPool(nn.Module):
    r"""The grouping step of HSDAG: Graph Parsing Network pooling.

    From `"Graph Parsing Networks" <https://openreview.net/forum?id=hv3SklibkL>`_
    (Song et al., ICLR 2024) as used by HSDAG (Duan et al., NeurIPS 2024):

    .. math::
        s_{uv} = \sigma\big(\mathrm{MLP}(\mathbf{z}_u \odot \mathbf{z}_v)\big), \qquad
        d(v) = \operatorname*{argmax}_{e \ni v} s_e

    (ties: lowest edge index; the graph is read as undirected, self-loops are
    ignored). The groups are the connected components of
    :math:`\{d(v)\}_v`. With symmetric scores the dominant edges form a forest
    in which every tree grows around one mutually dominant pair; this is what
    GPN's parsing loop computes, in one pass.

    **No collapse.** One pass can still merge a whole connected graph (a star,
    or a path of three nodes, always does). A single group would only allow
    single-device placements, so: if a graph of at least two nodes ends as one
    group, its weakest dominant edge is dropped (lowest score, then lowest
    index), which splits it into two groups. Splitting never removes a
    placement: anything constant on coarser groups is constant on finer ones.

    **Pooling.** With :math:`\mathbf{S}` the one-hot assignment,
    :math:`\mathbf{C} = \mathrm{diag}(\mathbf{S}^\top\mathbf{1})` the group sizes and
    :math:`n_v = s_{d(v)}` (``1`` for a node without edges),

    .. math::
        \mathbf{X}' = \mathbf{C}^{-1}\mathbf{S}^\top (\mathbf{Z} \odot \mathbf{n}), \qquad
        \mathbf{A}' = \mathbf{S}^\top \mathbf{A} \mathbf{S},

    so the pooled features depend on the scores and gradients reach the
    scorer. ``reduce="sum"`` drops :math:`\mathbf{C}^{-1}` (GPN's sum; its scale
    grows with the group, which makes one optimiser step move a placer on top
    of it a lot, see :mod:`policies.hsdag.policy`).

    **Exploration.** ``grouping_noise > 0`` adds Gumbel noise of that scale to
    the score logits before the dominant edges (and the no-collapse rule's
    weakest edge) are chosen; the gates :math:`n_v` keep the noiseless scores
    of the noiseless dominant edges, so re-pooling the sampled grouping
    without noise (``assignment=``) gives the same pooled features.

    **Sampled grouping** (``sample_grouping``). Instead of the shared edge
    noise above, every node draws its dominant edge from the softmax of its
    incident edges' score logits at temperature ``grouping_noise``
    (:func:`sample_partners`); the draws travel with the sample, and
    :func:`partner_logp` gives their log-probability under the current scores,
    so a policy gradient trains the scorer on the reward. Off by default (what it
    was measured to do: docs/results/learning.md, "Exploration over groupings").

    Args:
        channels: embedding width ``H``.
        score_layers: layers of the scoring MLP (1 = linear).
        reduce: ``"mean"`` or ``"sum"`` pooling of the gated node states.
        self_loops: also score one loop per node (:math:`\mathbf{z}_v \odot
            \mathbf{z}_v`) as a candidate dominant edge, so a node can stay a
            group of its own; the no-collapse rule only drops edges between
            two nodes.

    Shapes:
        - **input:** node states :math:`(N, H)`, edge indices :math:`(2, E)`,
          optional graph index :math:`(N)`, optional given assignment :math:`(N)`
        - **output:** (:class:`Grouping`, :class:`PooledGraph`)
    """

    def __init__(
        self, channels: int, score_layers: int = 2, reduce: str = "mean", self_loops: bool = False
    ) -> None:
        super().__init__()
        if reduce not in POOLINGS:
            raise ValueError(f"reduce must be one of {POOLINGS}, got {reduce!r}.")
        self.channels = channels
        self.reduce = reduce
        self.self_loops = bool(self_loops)
        self.score_mlp = mlp(channels, channels, 1, score_layers)
        self.score_chunk = 4096
        self.reset_parameters()

    def reset_parameters(self) -> None:
        reset_sequential(self.score_mlp)

    def score_edges(self, z: Tensor, edge_index: Tensor) -> Tensor:
        """``[E]`` scores :math:`\\sigma(\\mathrm{MLP}(\\mathbf{z}_u \\odot \\mathbf{z}_v))`."""
        return torch.sigmoid(self.score_logits(z, edge_index))

    def score_logits(self, z: Tensor, edge_index: Tensor) -> Tensor:
        """``[E]`` the scores' logits :math:`\\mathrm{MLP}(\\mathbf{z}_u \\odot \\mathbf{z}_v)`."""
        src, dst = edge_index  # index_select: its backward (index_add) is much cheaper than z[src]'s
        return self.score_mlp(z.index_select(0, src) * z.index_select(0, dst)).view(-1)

    @torch.no_grad()
    def _score_all(self, z: Tensor, edge_index: Tensor) -> Tensor:
        """:meth:`score_edges` without gradients, ``score_chunk`` edges at a time (the
        ``[E, H]`` products of a large graph then stay in cache)."""
        out = z.new_empty(edge_index.size(1))
        for i in range(0, edge_index.size(1), self.score_chunk):
            out[i:i + self.score_chunk] = self.score_edges(z, edge_index[:, i:i + self.score_chunk])
        return out

    def forward(
        self,
        z: Tensor,
        edge_index: Tensor,
        batch: Optional[Tensor] = None,
        num_graphs: Optional[int] = None,
        assignment: Optional[Tensor] = None,
        grouping_noise: float = 0.0,
        sample_grouping: bool = False,
        partner: Optional[Tensor] = None,
        pool_edges: bool = True,
        gate_partner: Optional[Tensor] = None,
    ) -> Tuple[Grouping, PooledGraph]:
        """Scores edges, groups nodes and pools.

        Args:
            z: ``[N, H]`` node states.
            edge_index: ``[2, E]`` edges (directed; read as undirected).
            batch: ``[N]`` graph of each node for a disjoint union of graphs.
            num_graphs: number of graphs ``B`` (default ``batch.max() + 1``).
            assignment: ``[N]`` a grouping to use instead of parsing one (e.g.
                the grouping a sampled action was drawn under). Groups may not
                span two graphs.
            grouping_noise: Gumbel noise scale on the score logits for parsing
                (``0`` = deterministic parsing); unused with ``assignment``.
            sample_grouping: with ``grouping_noise > 0`` and no ``assignment``,
                every node draws its dominant edge on its own
                (:func:`sample_partners`, temperature ``grouping_noise``) and the
                grouping returns the draws and their log-probabilities.
            partner: ``[N]`` the partners drawn when ``assignment`` was sampled
                (with ``sample_grouping``): their log-probability under the
                current scores is returned (``Grouping.partner_logp``).
            pool_edges: build the pooled graph's edges :math:`\\mathbf{A}'` (a sort
                of the ``E`` edges; skip it when only the pooled features are used).
            gate_partner: ``[N]`` with ``assignment`` (and no ``partner``): each
                node's gate edge as the sampler chose it (``Grouping.gate_partner``).
                Only those edges are scored (with the sampler's parameters the same
                gates as parsing them again; the rest of a large graph's ``E`` edges,
                scored to find them, are skipped).
        """
        num_nodes = z.size(0)
        if batch is None:
            batch = torch.zeros(num_nodes, dtype=torch.long, device=z.device)
        if num_graphs is None:
            num_graphs = int(batch.max()) + 1 if num_nodes > 0 else 0
        if gate_partner is not None and assignment is not None and partner is None:
            return self._pool_gated(z, edge_index, batch, assignment, gate_partner, pool_edges)
        num_edges = edge_index.size(1)
        parse_index = edge_index
        if self.self_loops:  # candidate edges: the graph's, then one loop per node
            loops = torch.arange(num_nodes, device=edge_index.device)
            parse_index = torch.cat([edge_index, torch.stack([loops, loops])], dim=1)
        # Only the dominant edges' scores reach the outputs differentiably (the gates n_v);
        # every edge is scored without gradients to choose them, and the (at most N)
        # dominant ones are scored again with gradients: the values and gradients of
        # scoring all E with gradients, without keeping [E, H] activations for backward.
        parse_all = self._score_all(z, parse_index)
        edge_score = parse_all[:num_edges]
        dominant = dominant_edges(parse_index, parse_all, num_nodes, self.self_loops)

        temperature = float(grouping_noise)
        if sample_grouping and assignment is None and temperature > 0:
            parse_logits = torch.logit(parse_all, eps=1e-6)  # the draws' (no gradients)
            parse_dominant, partner = sample_partners(parse_index, parse_logits, num_nodes,
                                                      temperature, self.self_loops)
            assignment = parse_groups(parse_index, parse_all, parse_dominant, batch, num_graphs)
        elif not sample_grouping:
            partner = None
        logp = None
        if partner is not None:
            # every incident edge's logit with gradients: the draws' softmax needs them all
            logp = partner_logp(parse_index, self.score_logits(z, parse_index), partner,
                                temperature, self.self_loops)

        if assignment is None:
            parse_score, parse_dominant = parse_all, dominant
            if grouping_noise > 0 and parse_index.size(1) > 0:
                uniform = torch.rand_like(parse_all).clamp(1e-10, 1.0 - 1e-7)
                gumbel = -torch.log(-torch.log(uniform))
                parse_score = torch.logit(parse_all.detach(), eps=1e-6) + grouping_noise * gumbel
                parse_dominant = dominant_edges(parse_index, parse_score, num_nodes, self.self_loops)
            assignment = parse_groups(parse_index, parse_score, parse_dominant, batch, num_graphs)
        else:
            assignment = self._check_assignment(assignment, batch)
        num_groups, group_batch = groups_of_graphs(assignment, batch)

        node_score = torch.ones(num_nodes, dtype=z.dtype, device=z.device)
        has_edge = dominant >= 0
        if bool(has_edge.any()):
            if torch.is_grad_enabled():
                chosen, which = unique_ids(dominant[has_edge])
                scores = self.score_edges(z, parse_index[:, chosen])[which]
            else:
                scores = parse_all[dominant[has_edge]]
            node_score = node_score.masked_scatter(has_edge, scores)

        gates = torch.full_like(dominant, -1)  # the other end of each node's dominant edge
        if bool(has_edge.any()):
            src, dst = parse_index[:, dominant[has_edge]]
            gates[has_edge] = torch.where(src == torch.arange(num_nodes, device=z.device)[has_edge],
                                          dst, src)
        grouping = Grouping(assignment, num_groups, node_score, edge_score, dominant, group_batch,
                            partner, logp, gates)
        return grouping, self._pooled(z, edge_index, node_score, assignment, num_groups, group_batch,
                                      pool_edges)

    def _pooled(self, z: Tensor, edge_index: Tensor, node_score: Tensor, assignment: Tensor,
                num_groups: int, group_batch: Tensor, pool_edges: bool) -> PooledGraph:
        """The gated mean (or sum) of each group's node states, and its edges if asked."""
        x_pool = scatter(
            z * node_score.unsqueeze(-1), assignment, dim=0, dim_size=num_groups, reduce=self.reduce
        )
        pooled_edges = pooled_weight = None
        if pool_edges:
            pooled_edges, pooled_weight = coalesce(
                assignment[edge_index],
                torch.ones(edge_index.size(1), dtype=z.dtype, device=z.device),
                num_nodes=num_groups,
                reduce="sum",
            )
        return PooledGraph(x_pool, pooled_edges, pooled_weight, group_batch)

    def _pool_gated(self, z: Tensor, edge_index: Tensor, batch: Tensor, assignment: Tensor,
                    gate_partner: Tensor, pool_edges: bool) -> Tuple[Grouping, PooledGraph]:
        """:meth:`forward` with the grouping and each node's gate edge given: only the
        gate edges are scored (each unordered pair once: the score is symmetric)."""
        num_nodes = z.size(0)
        if gate_partner.shape != (num_nodes,):
            raise ValueError(f"gate_partner must give one node per node ({num_nodes}), got shape "
                             f"{tuple(gate_partner.shape)}.")
        assignment = self._check_assignment(assignment, batch)
        num_groups, group_batch = groups_of_graphs(assignment, batch)
        gates = gate_partner.long()
        node_score = torch.ones(num_nodes, dtype=z.dtype, device=z.device)
        has_edge = gates >= 0
        if bool(has_edge.any()):
            v = torch.arange(num_nodes, device=z.device)[has_edge]
            u = gates[has_edge]
            pairs, which = unique_ids(torch.minimum(u, v) * num_nodes + torch.maximum(u, v))
            ends = torch.stack([pairs // num_nodes, pairs % num_nodes])
            node_score = node_score.masked_scatter(has_edge, self.score_edges(z, ends)[which])
        grouping = Grouping(assignment, num_groups, node_score, None, None, group_batch,
                            gate_partner=gates)
        return grouping, self._pooled(z, edge_index, node_score, assignment, num_groups, group_batch,
                                      pool_edges)

    @staticmethod
    def _check_assignment(assignment: Tensor, batch: Tensor) -> Tensor:
        if assignment.shape != batch.shape:
            raise ValueError(
                f"assignment must give one group per node ({batch.numel()}), got shape "
                f"{tuple(assignment.shape)}."
            )
        if assignment.numel() == 0:
            return assignment.long()
        if bool((assignment < 0).any()):
            raise ValueError("assignment has negative group ids; every node needs a group.")
        _, assignment = unique_ids(assignment.long())
        lo = scatter(batch, assignment, reduce="min")
        hi = scatter(batch, assignment, reduce="max")
        if bool((lo != hi).any()):
            raise ValueError("A group of the given assignment spans two graphs of the batch.")
        return assignment

    def __repr__(self) -> str:
        return (f"{self.__class__.__name__}({self.channels}, reduce={self.reduce!r}, "
                f"self_loops={self.self_loops})")
