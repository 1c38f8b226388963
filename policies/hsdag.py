r"""The HSDAG policy: GCN embeddings, learned grouping, group placement.

HSDAG (Duan et al., "A Structure-Aware Framework for Learning Device Placements
on Computation Graphs", NeurIPS 2024) places a computation DAG on ``D`` devices
in one shot per step. This module holds its learned part (steps 3 to 5 of the
paper) as plain torch / torch-geometric modules, and the RLlib (new API stack)
:class:`~policies.hsdag_module.HSDAGRLModule` that wraps them (its own module):

1. **Embedding.** An input MLP and ``K`` :class:`~torch_geometric.nn.GCNConv`
   layers over the graph made undirected give the structural embedding
   :math:`\mathbf{E} \in \mathbb{R}^{N \times H}`, with a
   :class:`~torch_geometric.nn.GraphNorm` (per graph) after the input MLP and
   after every GCN layer (see "Normalisation" below). The node state of step
   :math:`t` is :math:`\mathbf{Z}^{(t)} = \mathrm{LayerNorm}(\mathbf{E} + \mathbf{M}^{(t)})`
   where :math:`\mathbf{M}^{(t)}` is the carried node state (zero at the start of
   an episode).
2. **Grouping** (:class:`GraphParsingPool`, the Graph Parsing Network step of
   Song et al., ICLR 2024): every edge gets
   :math:`s_{uv} = \sigma(\mathrm{MLP}(\mathbf{z}_u \odot \mathbf{z}_v))`, every
   node keeps its dominant (highest-scoring incident) edge, and the groups are
   the connected components of the dominant edges, so the number of groups is
   learned. A connected graph is never collapsed into a single group (see
   :class:`GraphParsingPool` for the rule).
3. **Pooling.** With the one-hot assignment :math:`\mathbf{S} \in \{0,1\}^{N \times G}`,
   the group sizes :math:`\mathbf{C} = \mathrm{diag}(\mathbf{S}^\top \mathbf{1})` and
   :math:`\mathbf{n}` the score of each node's dominant edge,
   :math:`\mathbf{X}' = \mathbf{C}^{-1}\mathbf{S}^\top(\mathbf{Z} \odot \mathbf{n})`
   (the score-gated *mean* of the group's node states; the scores gate the
   pooled features, so gradients reach the edge scorer) and
   :math:`\mathbf{A}' = \mathbf{S}^\top \mathbf{A} \mathbf{S}`.
4. **Placement.** An MLP maps each group embedding (optionally after one GCN
   layer over :math:`\mathbf{A}'`), after a LayerNorm, to logits over the ``D``
   devices; one device is drawn per group (:mod:`policies.distributions`).
5. **Node-state update.** Between the steps of an episode the node state becomes
   "its embedding plus its group's embedding":
   :math:`\mathbf{M}^{(t+1)} = \mathbf{S}\mathbf{X}'^{(t)}`, hence
   :math:`\mathbf{Z}^{(t+1)} = \mathrm{LayerNorm}(\mathbf{E} + \mathbf{S}\mathbf{X}'^{(t)})`,
   the paper's :math:`Z_v + Z'_v`.

**Normalisation (why the policy no longer collapses).** Three changes to the
plain GCN -> sum-pool -> MLP stack, each measured on the simulator
(ResNet-50 / Inception-V3 / BERT-base, two devices, REINFORCE with Adam at the
paper's lr 1e-3):

* *Mean instead of sum pooling* (``pooling="mean"``; ``"sum"`` is the literal
  :math:`\mathbf{S}^\top(\mathbf{Z} \odot \mathbf{n})`). A summed group embedding
  grows with the group's size (groups of 5 to 30 nodes), and Adam moves every
  weight by about ``lr`` per step whatever the gradient's scale, so the first
  update alone moved the placer's logit gap from 0.1 to 1.5-1.8 and the second
  to 4-5: near-deterministic after two updates (20-70 distinct placements in
  500). With the mean (and the norms below) one update moves it by 0.2-0.5.
* *GraphNorm* (Cai et al., ICML 2021) after the input MLP and every GCN layer
  (``graph_norm=True``). Without it the GCN's node embeddings share one
  dominant direction (mean pairwise cosine 0.98 on ResNet-50; GCN smoothing
  plus biases): every group then looks the same to the placer, which can only
  learn one global device preference, and the edge scores vary so smoothly
  along the graph that it parses into 2-5 huge groups (often the 2 the
  no-collapse rule leaves: 4 possible placements). Centring each graph's
  embeddings (cosine about 0.01) gives the placer distinct groups and the
  scorer edges to tell apart.
* *LayerNorm on the group embedding* before the placer (``group_norm=True``),
  which bounds the placer's input whatever the pooling.

**Exploration over groupings** (``grouping_noise``, sampling only). The
parsed grouping is a deterministic function of the parameters and the node
state recurrence cycles between two groupings within an episode, so without
noise a whole iteration samples placements from one or two groupings. When
sampling (``forward_exploration``), the edges' score logits get Gumbel noise of
scale ``grouping_noise`` before the dominant edges are chosen, so edges of
nearly equal score take turns being dominant while clearly stronger edges stay
dominant: the grouping explores around the learned one. The scores that gate
the pooled features are the noiseless ones, and the learner re-uses the
sampled grouping (below), so ``logp`` is exactly the sampler's. Inference
(``forward_inference``) parses without noise. Measured (10 seeds, with rank
advantages): without noise 5/10 ResNet-50 runs on the 64 MB accelerator and
7/10 BERT runs on the unlimited one reached the best placement their grouping
can express; with noise 0.1-0.3, 9-10/10.

**What a grouping can express.** Every node joins the group of its dominant
edge, so a connected graph never has a single-node group: a placement that
puts one node alone on its device (e.g. ResNet-50's last Add+FC on the CPU
between two accelerator nodes, which the 64 MB accelerator's optimum needs)
cannot be sampled. Expressible placements are exactly those in which every
node shares its device with at least one neighbour. In that ResNet-50 case
the best one HSDAG found is 1.036x the optimum (1500 placements, two of three
seeds); within the paper's 500 it usually ends at 1.05-1.09x.

``self_loops=True`` lifts this limit: each node also scores its own loop and a
node whose loop beats its edges (and that no neighbour's dominant edge
reaches) is a group of its own. It is off by default because, measured on the
simulator (sequential objective, 500 placements, seeds 0-2 or 0-5), it made
learning worse: the parsing then gives about twice the groups (17 instead of
9.5 on ResNet-50's 37 nodes), the policy still explores after 500 placements
(480-500 distinct), and the median best/optimum went from 1.057 to 1.092 on
ResNet-50 with the 64 MB accelerator and from 1.019 to no feasible placement
at all on BERT-base with it; on the unlimited accelerator both reach
1.00-1.01.

``node_moves=True`` lifts it another way, without changing the grouping:
after the groups' devices are drawn, each node may move off its group's
device with a learned probability (a head on the node state, starting at
about one moving node per placement; :mod:`policies.move_distribution`, whose
``logp`` is exact over the unobserved group devices). Every placement can
then be sampled, and the groups keep the coarse decisions.

``prior_device`` starts sampling around one device (``--start best_single``:
the fastest single device): a constant ``prior_logit`` added to that device's
logit in every group.

How the node state is carried in RLlib: as **RLModule state**
(``Columns.STATE_IN`` / ``Columns.STATE_OUT``, key ``"node_state"``,
``[N_max, H]`` per episode). It is a function of the policy's own parameters,
so the environment cannot compute it and must not have to; as module state
RLlib resets it to zeros at every episode start, stores it with each step,
and the learner re-runs the recurrence over sequences of ``max_seq_len`` steps
(RLlib's default 20 is the paper's episode length) with gradients flowing
through it (backpropagation through the episode). Set
``model_config["node_state_update"] = False`` for a stateless module.

How the grouping travels: the distribution inputs carry each node's group
(see :mod:`policies.distributions`), and ``forward_train`` re-uses the grouping
stored with the sample (``Columns.ACTION_DIST_INPUTS`` in the train batch), so
the learner's ``logp`` is the one of the sampled group decisions under the
grouping that produced them, even after parameter updates have moved the edge
scores and when exploration noise chose it (the scores still gate the pooled
features, so the edge scorer keeps learning). Each node's gate edge (its
noiseless dominant edge) travels with it as the extra model output
``"gate_partner"``, so the learner scores only those edges, not every edge of
every step to find them again: with the sampler's parameters the same values
and gradients, after an update the gates of the edges the sample was drawn with.

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

from policies.graph_parsing import GraphParsingPool, Grouping, PooledGraph, dominant_edges
from policies.hsdag_config import HSDAGConfig
from policies.layers import mlp, normalized_adjacency, reset_sequential
from policies.move_distribution import floored_logits

__all__ = ["HSDAGConfig", "HSDAGOutput", "HSDAGNet", "incumbent_majority", "GraphParsingPool", "Grouping",
           "PooledGraph", "dominant_edges"]


def incumbent_majority(incumbent: Tensor, assignment: Tensor, num_groups: int) -> Tensor:
    """``[G, D]``: per group, the one-hot device on which the incumbent (``[N, D]``
    one-hot, a zero row where there is none) puts most of its nodes (the lowest index
    on a tie; a zero row for a group with no incumbent)."""
    count = incumbent.new_zeros(num_groups, incumbent.size(-1)).index_add_(0, assignment, incumbent)
    top = F.one_hot(count.argmax(-1), incumbent.size(-1)).to(incumbent.dtype)
    return top * (count.sum(-1, keepdim=True) > 0)


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
        if norms is not None:
            h = norms[0](h, batch, num_graphs)
        if len(self.convs) > 0:
            adj_t = normalized_adjacency(edge_index, x.size(0), h.dtype)
            for i, conv in enumerate(self.convs):
                h = conv(h, adj_t)
                if norms is not None:
                    h = norms[i + 1](h, batch, num_graphs)
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
