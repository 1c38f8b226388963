r"""The HSDAG policy: GCN embeddings, learned grouping, group placement.

HSDAG (Duan et al., "A Structure-Aware Framework for Learning Device Placements
on Computation Graphs", NeurIPS 2024) places a computation DAG on ``D`` devices
in one shot per step. This module holds its learned part (steps 3 to 5 of the
paper) as plain torch / torch-geometric modules; the RLlib (new API stack)
:class:`~policies.hsdag.module.HSDAGRLModule` wraps them. An input MLP and ``K``
GCN layers give each node a structural embedding :math:`\mathbf{E}`; the node
state of step :math:`t` is :math:`\mathbf{Z}^{(t)} = \mathrm{LayerNorm}(\mathbf{E} +
\mathbf{M}^{(t)})`. :class:`GraphParsingPool` (the Graph Parsing Network of Song
et al., ICLR 2024) scores every edge, keeps each node's dominant edge and groups
the connected components of those edges, so the number of groups is learned;
each group's embedding is the score-gated mean of its nodes' states (the scores
gate the pooled features, so gradients reach the edge scorer). An MLP maps each
group embedding to logits over the devices and one device is drawn per group
(:mod:`policies.distributions`). Between steps the carried node state becomes
the node's group embedding, :math:`\mathbf{M}^{(t+1)} = \mathbf{S}\mathbf{X}'^{(t)}`,
the paper's :math:`Z_v + Z'_v`; RLlib carries it as RLModule state (``"node_state"``),
reset at each episode start and re-run by the learner through the episode.

The pooling is a mean rather than the literal sum
:math:`\mathbf{S}^\top(\mathbf{Z} \odot \mathbf{n})` (``pooling="sum"``), whose
scale grows with the group's size so that Adam's first updates make the policy
near-deterministic; a GraphNorm per graph after the input MLP and every GCN layer
keeps the GCN's embeddings from sharing one direction, which would make every
group look alike to the placer; a LayerNorm bounds the placer's input. When
sampling, Gumbel noise of scale ``grouping_noise`` on the edge scores lets nearly
equal edges take turns being dominant, so the grouping explores around the
learned one; the learner re-uses the sampled grouping and each node's gate edge
(``"gate_partner"``), so its ``logp`` is exactly the sampler's. What a grouping
can express: every node joins the group of its dominant edge, so a connected
graph has no single-node group and a placement with one node alone on its device
cannot be sampled; ``self_loops`` (a node may choose its own loop) and
``node_moves`` (a learned per-node move off its group's device,
:mod:`policies.hsdag.move_distribution`, with an exact ``logp``) lift that limit, and
``prior_device`` / ``prior_logit`` start sampling around one device. What these
choices were measured to do is in docs/results/learning.md.

Observation (one graph, padded; built by :func:`envs.observation.placement_spaces` and
:func:`envs.observation.pad_graph_observation`)::

    x           float32 [N_max, F]   node features (padded rows ignored)
    edge_index  int64   [2, E_max]   directed DAG edges src -> dst
    node_mask   float32 [N_max]      1 for real nodes
    edge_mask   float32 [E_max]      1 for real edges

Action: ``MultiDiscrete([D] * N_max)``, one device per node; padded nodes get the
fixed dummy action ``0``.
"""
from __future__ import annotations

from typing import NamedTuple, Optional

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric.nn import GCNConv, GraphNorm, global_mean_pool
from torch_geometric.utils import to_undirected

from policies.hsdag.graph_parsing import GraphParsingPool, Grouping, PooledGraph, dominant_edges
from policies.hsdag.config import HSDAGConfig
from policies.layers import mlp, normalized_adjacency, reset_sequential
from policies.hsdag.move_floor import floored_logits

__all__ = ["HSDAGConfig", "HSDAGOutput", "HSDAGNet", "incumbent_majority", "GraphParsingPool", "Grouping",
           "PooledGraph", "dominant_edges"]


def incumbent_majority(incumbent: Tensor, assignment: Tensor, num_groups: int) -> Tensor:
    """``[G, D]``: per group, the one-hot device on which the incumbent (``[N, D]``
    one-hot, a zero row where there is none) puts most of its nodes (the lowest index
    on a tie; a zero row for a group with no incumbent)."""
    count = incumbent.new_zeros(num_groups, incumbent.size(-1)).index_add_(0, assignment, incumbent)
    top = F.one_hot(count.argmax(-1), incumbent.size(-1)).to(incumbent.dtype)
    return top * (count.sum(-1, keepdim=True) > 0)


def _alone(num_nodes: int, batch: Optional[Tensor], num_graphs: Optional[int]) -> Optional[Tensor]:
    """``[N]`` bool: the nodes that are the only node of their graph (None when there are none)."""
    if batch is None:
        return torch.ones(num_nodes, dtype=torch.bool) if num_nodes == 1 else None
    counts = torch.bincount(batch, minlength=num_graphs or 0)
    alone = counts[batch] == 1
    return alone if bool(alone.any()) else None


def _graph_norm(norm: GraphNorm, h: Tensor, batch: Optional[Tensor], num_graphs: Optional[int],
                alone: Optional[Tensor]) -> Tensor:
    """GraphNorm, except on a graph of one node (a model the coarsening kept whole): there
    it would subtract the node from itself, leave only its bias, and divide by
    :math:`\\sqrt{\\epsilon}` on the way back (gradients of thousands, then NaN weights),
    so that node keeps its features."""
    if alone is None:
        return norm(h, batch, num_graphs)
    if bool(alone.all()):
        return h
    return torch.where(alone[:, None], h, norm(h, batch, num_graphs))


class HSDAGOutput(NamedTuple):
    """Everything one HSDAG step computes (``N`` nodes, ``G`` groups, ``B`` graphs).

    Attributes:
        node_logits: ``[N, D]`` device logits of each node's group.
        group_logits: ``[G, D]`` device logits per group.
        grouping: the :class:`Grouping`.
        pooled: the :class:`PooledGraph` (its edges only with ``pooled_gcn``, the one user of them).
        node_embedding: ``[N, H]`` the node states :math:`\\mathbf{Z}^{(t)}` used for grouping.
        next_node_state: ``[N, H]`` :math:`\\mathbf{M}^{(t+1)} = \\mathbf{S}\\mathbf{X}'`, each
            node's group embedding, to carry to the next step.
        graph_embedding: ``[B, H]`` mean of each graph's group embeddings.
        move_logits: ``[N]`` each node's move logit (``node_moves``), else ``None``.
    """

    node_logits: Tensor
    group_logits: Tensor
    grouping: Grouping
    pooled: PooledGraph
    node_embedding: Tensor
    next_node_state: Tensor
    graph_embedding: Tensor
    move_logits: Optional[Tensor] = None



class HSDAGNet(nn.Module):
    r"""The HSDAG network: embed, group, pool, place (one step of an episode).

    .. math::
        \mathbf{E} &= \mathrm{GCN}_K\big(\mathrm{ReLU}(\mathbf{W}_{in}\mathbf{x} + \mathbf{b})\big)
            \quad \text{(graph read as undirected, GraphNorm after each layer)} \\
        \mathbf{Z}^{(t)} &= \mathrm{LayerNorm}(\mathbf{E} + \mathbf{M}^{(t)}) \\
        (\mathbf{S}, \mathbf{X}', \mathbf{A}') &= \mathrm{GraphParsingPool}(\mathbf{Z}^{(t)}) \\
        \boldsymbol{\ell}_g &= \mathrm{MLP}_{place}(\mathrm{LayerNorm}(\mathbf{x}'_g)) \in \mathbb{R}^D \\
        \mathbf{M}^{(t+1)} &= \mathbf{S}\mathbf{X}'

    Args:
        in_channels: node feature width ``F``.
        num_devices: number of devices ``D``.
        config: sizes and switches (:class:`HSDAGConfig`).

    Shapes:
        - **input:** node features :math:`(N, F)`, edge indices :math:`(2, E)`,
          optional node state :math:`(N, H)`, graph index :math:`(N)`,
          optional assignment :math:`(N)`
        - **output:** :class:`HSDAGOutput`
    """

    def __init__(self, in_channels: int, num_devices: int, config: HSDAGConfig = HSDAGConfig()) -> None:
        super().__init__()
        if num_devices < 1:
            raise ValueError(f"num_devices must be >= 1, got {num_devices}.")
        self.in_channels = in_channels
        self.num_devices = num_devices
        self.config = config
        h = config.hidden_dim
        self.input_mlp = nn.Sequential(nn.Linear(in_channels, h), nn.ReLU())
        # normalize=False: embed() normalises the adjacency once for all layers (same values)
        self.convs = nn.ModuleList(GCNConv(h, h, normalize=False) for _ in range(config.num_gcn_layers))
        self.graph_norms = (
            nn.ModuleList(GraphNorm(h) for _ in range(config.num_gcn_layers + 1))
            if config.graph_norm else None
        )
        self.state_norm = nn.LayerNorm(h)
        self.pool = GraphParsingPool(h, config.score_layers, reduce=config.pooling,
                                     self_loops=config.self_loops)
        self.pooled_conv = GCNConv(h, h) if config.pooled_gcn else None
        self.group_norm = nn.LayerNorm(h) if config.group_norm else None
        self.placer = mlp(h, h, num_devices, config.placer_layers)
        self.mover = mlp(h, h, 1, 2) if config.node_moves else None
        prior = torch.zeros(num_devices)
        if 0 <= int(config.prior_device) < num_devices:
            prior[int(config.prior_device)] = float(config.prior_logit)
        self.register_buffer("prior", prior, persistent=False)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        reset_sequential(self.input_mlp)
        for conv in self.convs:
            conv.reset_parameters()
        for norm in self.graph_norms or ():
            norm.reset_parameters()
        self.state_norm.reset_parameters()
        self.pool.reset_parameters()
        if self.pooled_conv is not None:
            self.pooled_conv.reset_parameters()
        if self.group_norm is not None:
            self.group_norm.reset_parameters()
        reset_sequential(self.placer)
        if self.mover is not None:
            reset_sequential(self.mover)
            nn.init.zeros_(self.mover[-1].weight)  # every node starts at the prior
            nn.init.zeros_(self.mover[-1].bias)

    @torch.no_grad()
    def soften(self, factor: float) -> None:
        """Scales the placer's and the move head's output layers by ``factor``: the
        group logits (and the moves, toward their prior) keep their order but lose
        ``1 - factor`` of their spread, so sampling explores again."""
        for head in (self.placer, self.mover):
            if head is not None:
                head[-1].weight.mul_(factor)
                head[-1].bias.mul_(factor)

    def embed(self, x: Tensor, edge_index: Tensor, batch: Optional[Tensor] = None,
              num_graphs: Optional[int] = None) -> Tensor:
        """``[N, H]`` structural embedding :math:`\\mathbf{E}` (GCN over the undirected
        graph, its normalised adjacency built once for all layers and multiplied as a
        sparse matrix; GraphNorm statistics per graph of ``batch``)."""
        norms = self.graph_norms
        h = self.input_mlp(x)
        alone = _alone(x.size(0), batch, num_graphs) if norms is not None else None
        if norms is not None:
            h = _graph_norm(norms[0], h, batch, num_graphs, alone)
        if len(self.convs) > 0:
            adj_t = normalized_adjacency(edge_index, x.size(0), h.dtype)
            for i, conv in enumerate(self.convs):
                h = conv(h, adj_t)
                if norms is not None:
                    h = _graph_norm(norms[i + 1], h, batch, num_graphs, alone)
                if i < len(self.convs) - 1:
                    h = F.relu(h)
        return h

    def incumbent_lean(self, group_batch: Tensor, num_graphs: int, like: Tensor) -> Tensor:
        """``[G]``: the logit by which each group leans to its incumbent majority:
        ``incumbent_prior``, or with ``incumbent_flips`` F at least
        :math:`\\log((D - 1) G / F)` for a graph of ``G`` groups, so that an untrained
        policy changes about F groups of the incumbent per proposal on a graph of any
        size (with the fixed lean, about ``G / (1 + e^{prior})``: 7 of 60 groups at 2)."""
        lean = like.new_full((group_batch.numel(),), float(self.config.incumbent_prior))
        if self.config.incumbent_flips > 0 and group_batch.numel():
            groups = torch.bincount(group_batch, minlength=num_graphs).to(like.dtype)[group_batch]
            scaled = torch.log((self.num_devices - 1) * groups / self.config.incumbent_flips)
            lean = torch.maximum(lean, scaled)
        return lean

    def forward(
        self,
        x: Tensor,
        edge_index: Tensor,
        node_state: Optional[Tensor] = None,
        batch: Optional[Tensor] = None,
        num_graphs: Optional[int] = None,
        assignment: Optional[Tensor] = None,
        grouping_noise: float = 0.0,
        embedding: Optional[Tensor] = None,
        partner: Optional[Tensor] = None,
        gate_partner: Optional[Tensor] = None,
    ) -> HSDAGOutput:
        """One step. ``node_state`` is :math:`\\mathbf{M}^{(t)}` (zeros if ``None``);
        ``assignment`` replaces the parsed grouping and ``grouping_noise`` perturbs
        the parsing (see :meth:`GraphParsingPool.forward`); ``embedding`` is
        :meth:`embed`'s result for these ``x`` and ``edge_index`` when the caller
        already has it (the steps of an episode share it); ``partner``: the
        dominant-edge draws of a sampled ``assignment`` (``sampled_grouping``);
        ``gate_partner``: with ``assignment``, each node's gate edge as sampled
        (:class:`Grouping`'s ``gate_partner``), so the pool scores only those edges."""
        num_nodes = x.size(0)
        if batch is None:
            batch = torch.zeros(num_nodes, dtype=torch.long, device=x.device)
        if num_graphs is None:
            num_graphs = int(batch.max()) + 1 if num_nodes > 0 else 1
        emb = self.embed(x, edge_index, batch, num_graphs) if embedding is None else embedding
        z = self.state_norm(emb if node_state is None else emb + node_state)
        grouping, pooled = self.pool(z, edge_index, batch, num_graphs, assignment, grouping_noise,
                                     sample_grouping=self.config.sampled_grouping, partner=partner,
                                     pool_edges=self.pooled_conv is not None, gate_partner=gate_partner)

        gx = pooled.x
        if self.pooled_conv is not None and grouping.num_groups > 0:
            ei, ew = pooled.edge_index, pooled.edge_weight
            off = ei[0] != ei[1]
            ei, ew = to_undirected(ei[:, off], ew[off], num_nodes=grouping.num_groups, reduce="sum")
            gx = gx + F.relu(self.pooled_conv(gx, ei, ew))
        if self.group_norm is not None:
            gx = self.group_norm(gx)
        group_logits = self.placer(gx) + self.prior
        majority = None
        if self.config.incumbent_prior > 0:  # each group leans to its incumbent majority
            inc = x[:, -self.num_devices:]
            majority = incumbent_majority(inc, grouping.assignment, grouping.num_groups)
            lean = self.incumbent_lean(grouping.group_batch, num_graphs, gx)
            group_logits = group_logits + lean.unsqueeze(-1) * majority
        node_logits = group_logits.index_select(0, grouping.assignment)
        graph_embedding = global_mean_pool(gx, grouping.group_batch, size=num_graphs)
        move_logits = None
        if self.mover is not None:
            # prior: about one moving node per placement, logit(1 / n) per graph of n nodes
            n = torch.bincount(batch, minlength=num_graphs).to(z.dtype).clamp_min(2.0)[batch]
            move_logits = self.mover(z).squeeze(-1) - torch.log(n - 1.0)
            if majority is not None:  # a node the incumbent places apart from its group's
                # majority moves as likely as the group keeps it
                apart = inc.sum(-1) - (inc * majority.index_select(0, grouping.assignment)).sum(-1)
                lean_n = lean.index_select(0, grouping.assignment)
                move_logits = move_logits + apart * (lean_n + torch.log(n - 1.0))
            if self.config.move_floor > 0:
                move_logits = floored_logits(move_logits, self.config.move_floor / n)
        return HSDAGOutput(
            node_logits=node_logits,
            group_logits=group_logits,
            grouping=grouping,
            pooled=pooled,
            node_embedding=z,
            next_node_state=pooled.x.index_select(0, grouping.assignment),
            graph_embedding=graph_embedding,
            move_logits=move_logits,
        )
