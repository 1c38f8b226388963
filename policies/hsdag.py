r"""The HSDAG policy: GCN embeddings, learned grouping, group placement.

HSDAG (Duan et al., "A Structure-Aware Framework for Learning Device Placements
on Computation Graphs", NeurIPS 2024) places a computation DAG on ``D`` devices
in one shot per step. This module holds its learned part (steps 3 to 5 of the
paper) as plain torch / torch-geometric modules, and the RLlib (new API stack)
:class:`HSDAGRLModule` that wraps them:

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
features, so the edge scorer keeps learning).

Observation (one graph, padded; built by :func:`placement_spaces` and
:func:`pad_graph_observation`)::

    x           float32 [N_max, F]   node features (padded rows ignored)
    edge_index  int64   [2, E_max]   directed DAG edges src -> dst
    node_mask   float32 [N_max]      1 for real nodes
    edge_mask   float32 [E_max]      1 for real edges

Action: ``MultiDiscrete([D] * N_max)``, one device per node; padded nodes get the
fixed dummy action ``0``.
"""
from __future__ import annotations

import dataclasses
import logging
from typing import Any, Dict, Mapping, NamedTuple, Optional, Tuple

import gymnasium as gym
import numpy as np
import scipy.sparse as sp
import torch
import torch.nn.functional as F
from ray.rllib.core.columns import Columns
from ray.rllib.core.rl_module.apis import ValueFunctionAPI
from ray.rllib.core.rl_module.torch import TorchRLModule
from ray.rllib.utils.annotations import override
from scipy.sparse.csgraph import connected_components
from torch import Tensor, nn
from torch_geometric.nn import GCNConv, GraphNorm, global_mean_pool
from torch_geometric.utils import coalesce, scatter, to_undirected

from policies.distributions import (
    PADDED_GROUP,
    GroupedPlacementDistribution,
    pack_dist_inputs,
    unpack_dist_inputs,
)

__all__ = [
    "HSDAGConfig",
    "Grouping",
    "PooledGraph",
    "HSDAGOutput",
    "GraphParsingPool",
    "HSDAGNet",
    "GraphBatch",
    "unpad_graphs",
    "pad_node_values",
    "placement_spaces",
    "pad_graph_observation",
    "HSDAGRLModule",
]

logger = logging.getLogger(__name__)

NODE_STATE = "node_state"
POOLINGS = ("mean", "sum")


@dataclasses.dataclass(frozen=True)
class HSDAGConfig:
    """Sizes and switches of the HSDAG network (read from an RLModule's ``model_config``).

    Attributes:
        hidden_dim: width ``H`` of node, group and graph embeddings.
        num_gcn_layers: number ``K`` of GCN layers after the input MLP.
        score_layers: layers of the edge-scoring MLP (1 = a linear scorer).
        placer_layers: layers of the placer MLP (group embedding -> D logits).
        pooled_gcn: run one GCN layer over the pooled graph ``A'`` before the placer.
        node_state_update: carry the node state ``Z + Z'`` between the steps of an
            episode (as RLlib module state); ``False`` makes the module stateless.
        reuse_sampled_grouping: in ``forward_train``, group nodes as they were
            grouped when the action was sampled (read from the stored
            ``Columns.ACTION_DIST_INPUTS``), so ``logp`` is the one of the sampled
            group decisions.
        pooling: ``"mean"`` (score-gated mean of a group's node states) or
            ``"sum"`` (the literal :math:`\\mathbf{S}^\\top(\\mathbf{Z} \\odot \\mathbf{n})`,
            whose scale grows with the group; see the module docstring).
        graph_norm: a GraphNorm after the input MLP and after every GCN layer.
        group_norm: a LayerNorm on the group embeddings before the placer.
        grouping_noise: scale of the Gumbel noise added to the edges' score
            logits when sampling (``forward_exploration``) before the dominant
            edges are chosen; ``0`` parses exactly as at inference.
        self_loops: every node also scores its own loop
            :math:`\sigma(\mathrm{MLP}(\mathbf{z}_v \odot \mathbf{z}_v))` and may
            choose it as its dominant edge, so single-node groups can be
            parsed (see "What a grouping can express" in the module docstring).
    """

    hidden_dim: int = 64
    num_gcn_layers: int = 2
    score_layers: int = 2
    placer_layers: int = 2
    pooled_gcn: bool = False
    node_state_update: bool = True
    reuse_sampled_grouping: bool = True
    pooling: str = "mean"
    graph_norm: bool = True
    group_norm: bool = True
    grouping_noise: float = 0.3
    self_loops: bool = False

    def __post_init__(self) -> None:
        for name in ("hidden_dim", "score_layers", "placer_layers"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"HSDAGConfig.{name} must be >= 1, got {getattr(self, name)}.")
        if int(self.num_gcn_layers) < 0:
            raise ValueError(f"HSDAGConfig.num_gcn_layers must be >= 0, got {self.num_gcn_layers}.")
        if self.pooling not in POOLINGS:
            raise ValueError(f"HSDAGConfig.pooling must be one of {POOLINGS}, got {self.pooling!r}.")
        if not float(self.grouping_noise) >= 0:
            raise ValueError(f"HSDAGConfig.grouping_noise must be >= 0, got {self.grouping_noise}.")

    @classmethod
    def from_model_config(cls, model_config: Any) -> "HSDAGConfig":
        """Picks this config's fields out of an RLlib ``model_config`` (dict or dataclass).

        Keys that are not fields (RLlib's own, such as ``max_seq_len``) are ignored.
        """
        if model_config is None:
            return cls()
        if dataclasses.is_dataclass(model_config):
            model_config = dataclasses.asdict(model_config)
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in dict(model_config).items() if k in names})


def _mlp(in_dim: int, hidden_dim: int, out_dim: int, num_layers: int) -> nn.Sequential:
    """``num_layers`` linear layers with ReLU between them (none after the last)."""
    dims = [in_dim] + [hidden_dim] * (num_layers - 1) + [out_dim]
    layers: list[nn.Module] = []
    for i in range(num_layers):
        layers.append(nn.Linear(dims[i], dims[i + 1]))
        if i < num_layers - 1:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


def _reset_sequential(seq: nn.Module) -> None:
    for m in seq.modules():
        if isinstance(m, (nn.Linear, nn.LayerNorm)):
            m.reset_parameters()


class Grouping(NamedTuple):
    """The learned grouping of one (batched) graph.

    Attributes:
        assignment: ``[N]`` long, group of each node; groups are numbered
            ``0..G-1`` in the order of their first (lowest-index) node.
        num_groups: ``G``.
        node_score: ``[N]`` score of each node's dominant edge (``1`` for a node
            without edges); differentiable w.r.t. the edge scorer.
        edge_score: ``[E]`` score in ``[0, 1]`` of every input edge.
        dominant_edge: ``[N]`` long, index into ``edge_index`` of each node's
            dominant edge, ``-1`` for a node without edges; with self-loop
            parsing, ``E + v`` when node ``v`` chose its own loop.
        group_batch: ``[G]`` long, graph of each group (all zeros for one graph).
    """

    assignment: Tensor
    num_groups: int
    node_score: Tensor
    edge_score: Tensor
    dominant_edge: Tensor
    group_batch: Tensor


class PooledGraph(NamedTuple):
    """The pooled (group) graph.

    Attributes:
        x: ``[G, H]`` group embeddings: the score-gated mean (or sum) of the
            group's node states, :math:`\\mathbf{C}^{-1}\\mathbf{S}^\\top(\\mathbf{Z} \\odot \\mathbf{n})`.
        edge_index: ``[2, E']`` nonzero entries of
            :math:`\\mathbf{A}' = \\mathbf{S}^\\top\\mathbf{A}\\mathbf{S}` (directed;
            diagonal entries count the edges inside a group).
        edge_weight: ``[E']`` the entries' values (numbers of input edges).
        batch: ``[G]`` graph of each group.
    """

    x: Tensor
    edge_index: Tensor
    edge_weight: Tensor
    batch: Tensor


class HSDAGOutput(NamedTuple):
    """Everything one HSDAG step computes (``N`` nodes, ``G`` groups, ``B`` graphs).

    Attributes:
        node_logits: ``[N, D]`` device logits of each node's group.
        group_logits: ``[G, D]`` device logits per group.
        grouping: the :class:`Grouping`.
        pooled: the :class:`PooledGraph`.
        node_embedding: ``[N, H]`` the node states :math:`\\mathbf{Z}^{(t)}` used for grouping.
        next_node_state: ``[N, H]`` :math:`\\mathbf{M}^{(t+1)} = \\mathbf{S}\\mathbf{X}'`, each
            node's group embedding, to carry to the next step.
        graph_embedding: ``[B, H]`` mean of each graph's group embeddings.
    """

    node_logits: Tensor
    group_logits: Tensor
    grouping: Grouping
    pooled: PooledGraph
    node_embedding: Tensor
    next_node_state: Tensor
    graph_embedding: Tensor


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
    _, labels = torch.unique(labels, return_inverse=True)
    num_groups = int(labels.max()) + 1 if num_nodes > 0 else 0
    node_ids = torch.arange(num_nodes, device=labels.device)
    first = torch.full((num_groups,), num_nodes, dtype=torch.long, device=labels.device)
    first = first.scatter_reduce(0, labels, node_ids, reduce="amin", include_self=True)
    order = torch.argsort(first)
    rank = torch.empty_like(order)
    rank[order] = torch.arange(num_groups, device=labels.device)
    return rank[labels], first[order]


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
    kept = torch.unique(dominant[dominant >= 0])
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
    of it a lot, see :mod:`policies.hsdag`).

    **Exploration.** ``grouping_noise > 0`` adds Gumbel noise of that scale to
    the score logits before the dominant edges (and the no-collapse rule's
    weakest edge) are chosen; the gates :math:`n_v` keep the noiseless scores
    of the noiseless dominant edges, so re-pooling the sampled grouping
    without noise (``assignment=``) gives the same pooled features.

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
        self.score_mlp = _mlp(channels, channels, 1, score_layers)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        _reset_sequential(self.score_mlp)

    def score_edges(self, z: Tensor, edge_index: Tensor) -> Tensor:
        """``[E]`` scores :math:`\\sigma(\\mathrm{MLP}(\\mathbf{z}_u \\odot \\mathbf{z}_v))`."""
        src, dst = edge_index
        return torch.sigmoid(self.score_mlp(z[src] * z[dst])).view(-1)

    def forward(
        self,
        z: Tensor,
        edge_index: Tensor,
        batch: Optional[Tensor] = None,
        num_graphs: Optional[int] = None,
        assignment: Optional[Tensor] = None,
        grouping_noise: float = 0.0,
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
        """
        num_nodes = z.size(0)
        if batch is None:
            batch = torch.zeros(num_nodes, dtype=torch.long, device=z.device)
        if num_graphs is None:
            num_graphs = int(batch.max()) + 1 if num_nodes > 0 else 0
        num_edges = edge_index.size(1)
        parse_index = edge_index
        if self.self_loops:  # candidate edges: the graph's, then one loop per node
            loops = torch.arange(num_nodes, device=edge_index.device)
            parse_index = torch.cat([edge_index, torch.stack([loops, loops])], dim=1)
        parse_all = self.score_edges(z, parse_index)
        edge_score = parse_all[:num_edges]
        dominant = dominant_edges(parse_index, parse_all, num_nodes, self.self_loops)

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
        num_groups = int(assignment.max()) + 1 if num_nodes > 0 else 0
        group_batch = torch.zeros(num_groups, dtype=torch.long, device=z.device)
        group_batch = group_batch.scatter_reduce(0, assignment, batch, reduce="amax", include_self=False)

        if parse_index.size(1) > 0:
            node_score = torch.where(
                dominant >= 0, parse_all[dominant.clamp(min=0)], torch.ones_like(dominant, dtype=z.dtype)
            )
        else:
            node_score = torch.ones(num_nodes, dtype=z.dtype, device=z.device)

        x_pool = scatter(
            z * node_score.unsqueeze(-1), assignment, dim=0, dim_size=num_groups, reduce=self.reduce
        )
        pooled_edges, pooled_weight = coalesce(
            assignment[edge_index],
            torch.ones(edge_index.size(1), dtype=z.dtype, device=z.device),
            num_nodes=num_groups,
            reduce="sum",
        )
        grouping = Grouping(assignment, num_groups, node_score, edge_score, dominant, group_batch)
        return grouping, PooledGraph(x_pool, pooled_edges, pooled_weight, group_batch)

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
        _, assignment = torch.unique(assignment.long(), return_inverse=True)
        lo = scatter(batch, assignment, reduce="min")
        hi = scatter(batch, assignment, reduce="max")
        if bool((lo != hi).any()):
            raise ValueError("A group of the given assignment spans two graphs of the batch.")
        return assignment

    def __repr__(self) -> str:
        return (f"{self.__class__.__name__}({self.channels}, reduce={self.reduce!r}, "
                f"self_loops={self.self_loops})")


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
        self.convs = nn.ModuleList(GCNConv(h, h) for _ in range(config.num_gcn_layers))
        self.graph_norms = (
            nn.ModuleList(GraphNorm(h) for _ in range(config.num_gcn_layers + 1))
            if config.graph_norm else None
        )
        self.state_norm = nn.LayerNorm(h)
        self.pool = GraphParsingPool(h, config.score_layers, reduce=config.pooling,
                                     self_loops=config.self_loops)
        self.pooled_conv = GCNConv(h, h) if config.pooled_gcn else None
        self.group_norm = nn.LayerNorm(h) if config.group_norm else None
        self.placer = _mlp(h, h, num_devices, config.placer_layers)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        _reset_sequential(self.input_mlp)
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
        _reset_sequential(self.placer)

    def embed(self, x: Tensor, edge_index: Tensor, batch: Optional[Tensor] = None,
              num_graphs: Optional[int] = None) -> Tensor:
        """``[N, H]`` structural embedding :math:`\\mathbf{E}` (GCN over the undirected
        graph; GraphNorm statistics per graph of ``batch``)."""
        norms = self.graph_norms
        h = self.input_mlp(x)
        if norms is not None:
            h = norms[0](h, batch, num_graphs)
        if len(self.convs) > 0:
            undirected = to_undirected(edge_index, num_nodes=x.size(0))
            for i, conv in enumerate(self.convs):
                h = conv(h, undirected)
                if norms is not None:
                    h = norms[i + 1](h, batch, num_graphs)
                if i < len(self.convs) - 1:
                    h = F.relu(h)
        return h

    def forward(
        self,
        x: Tensor,
        edge_index: Tensor,
        node_state: Optional[Tensor] = None,
        batch: Optional[Tensor] = None,
        num_graphs: Optional[int] = None,
        assignment: Optional[Tensor] = None,
        grouping_noise: float = 0.0,
    ) -> HSDAGOutput:
        """One step. ``node_state`` is :math:`\\mathbf{M}^{(t)}` (zeros if ``None``);
        ``assignment`` replaces the parsed grouping and ``grouping_noise`` perturbs
        the parsing (see :meth:`GraphParsingPool.forward`)."""
        num_nodes = x.size(0)
        if batch is None:
            batch = torch.zeros(num_nodes, dtype=torch.long, device=x.device)
        if num_graphs is None:
            num_graphs = int(batch.max()) + 1 if num_nodes > 0 else 1
        emb = self.embed(x, edge_index, batch, num_graphs)
        z = self.state_norm(emb if node_state is None else emb + node_state)
        grouping, pooled = self.pool(z, edge_index, batch, num_graphs, assignment, grouping_noise)

        gx = pooled.x
        if self.pooled_conv is not None and grouping.num_groups > 0:
            ei, ew = pooled.edge_index, pooled.edge_weight
            off = ei[0] != ei[1]
            ei, ew = to_undirected(ei[:, off], ew[off], num_nodes=grouping.num_groups, reduce="sum")
            gx = gx + F.relu(self.pooled_conv(gx, ei, ew))
        if self.group_norm is not None:
            gx = self.group_norm(gx)
        group_logits = self.placer(gx)
        node_logits = group_logits[grouping.assignment]
        graph_embedding = global_mean_pool(gx, grouping.group_batch, size=num_graphs)
        return HSDAGOutput(
            node_logits=node_logits,
            group_logits=group_logits,
            grouping=grouping,
            pooled=pooled,
            node_embedding=z,
            next_node_state=pooled.x[grouping.assignment],
            graph_embedding=graph_embedding,
        )


# --------------------------------------------------------------------------------------
# Padded observations <-> disjoint unions of graphs
# --------------------------------------------------------------------------------------
class GraphBatch(NamedTuple):
    """A batch of padded graph observations as one disjoint union (PyG style).

    Attributes:
        x: ``[n, F]`` features of the real nodes, graph by graph.
        edge_index: ``[2, e]`` real edges, renumbered into the union.
        batch: ``[n]`` graph of each node.
        node_valid: ``[B, N_max]`` bool, which padded slots are real nodes (the
            union's nodes are ``node_valid``'s True entries in row-major order).
        num_graphs: ``B``.
    """

    x: Tensor
    edge_index: Tensor
    batch: Tensor
    node_valid: Tensor
    num_graphs: int


def unpad_graphs(x: Tensor, edge_index: Tensor, node_mask: Tensor, edge_mask: Tensor) -> GraphBatch:
    """Turns padded observations ``[B, N_max, F]``, ``[B, 2, E_max]``, ``[B, N_max]``,
    ``[B, E_max]`` into a :class:`GraphBatch`.

    Raises:
        ValueError: if a real edge points outside ``[0, N_max)`` or to a padded node.
    """
    num_graphs, max_nodes = node_mask.shape
    device = x.device
    valid = node_mask > 0.5
    flat_valid = valid.reshape(-1)
    new_id = torch.cumsum(flat_valid.long(), 0) - 1
    xs = x.reshape(num_graphs * max_nodes, -1)[flat_valid]
    batch = torch.arange(num_graphs, device=device).repeat_interleave(max_nodes)[flat_valid]

    edge_index = edge_index.long()
    real = edge_mask > 0.5
    if bool(real.any()):
        ends = edge_index.permute(1, 0, 2)[:, real]  # [2, e]
        if bool(((ends < 0) | (ends >= max_nodes)).any()):
            raise ValueError(
                f"A real edge (edge_mask=1) has an endpoint outside [0, {max_nodes}); "
                "edge_index must hold node slots of the padded observation."
            )
        offset = (torch.arange(num_graphs, device=device) * max_nodes).unsqueeze(1).expand_as(real)[real]
        ends = ends + offset
        if not bool(flat_valid[ends].all()):
            raise ValueError(
                "A real edge (edge_mask=1) touches a padded node (node_mask=0); "
                "mask the edge or mark the node as real."
            )
        union_edges = new_id[ends]
    else:
        union_edges = torch.empty(2, 0, dtype=torch.long, device=device)
    return GraphBatch(xs, union_edges, batch, valid, num_graphs)


def pad_node_values(values: Tensor, node_valid: Tensor, fill: float = 0.0) -> Tensor:
    """Scatters union values ``[n, ...]`` back to padded ``[B, N_max, ...]`` slots."""
    num_graphs, max_nodes = node_valid.shape
    out = values.new_full((num_graphs * max_nodes, *values.shape[1:]), fill)
    out[node_valid.reshape(-1)] = values
    return out.reshape(num_graphs, max_nodes, *values.shape[1:])


def placement_spaces(
    max_nodes: int, max_edges: int, num_features: int, num_devices: int
) -> Tuple[gym.spaces.Dict, gym.spaces.MultiDiscrete]:
    """The observation and action spaces of :class:`HSDAGRLModule`.

    Returns:
        ``(Dict(x: Box[N_max, F] float32, edge_index: Box[2, E_max] int64 in
        [0, N_max), node_mask: Box[N_max] in {0, 1}, edge_mask: Box[E_max] in {0, 1}),
        MultiDiscrete([D] * N_max))``.
    """
    if min(max_nodes, max_edges, num_features, num_devices) < 1:
        raise ValueError("max_nodes, max_edges, num_features and num_devices must all be >= 1.")
    obs = gym.spaces.Dict(
        {
            "x": gym.spaces.Box(-np.inf, np.inf, (max_nodes, num_features), np.float32),
            "edge_index": gym.spaces.Box(0, max_nodes - 1, (2, max_edges), np.int64),
            "node_mask": gym.spaces.Box(0.0, 1.0, (max_nodes,), np.float32),
            "edge_mask": gym.spaces.Box(0.0, 1.0, (max_edges,), np.float32),
        }
    )
    return obs, gym.spaces.MultiDiscrete([num_devices] * max_nodes)


def pad_graph_observation(
    x: np.ndarray, edge_index: np.ndarray, max_nodes: int, max_edges: int
) -> Dict[str, np.ndarray]:
    """Pads one graph (``x [n, F]``, ``edge_index [2, e]``) into the observation format."""
    x = np.asarray(x, dtype=np.float32)
    edge_index = np.asarray(edge_index, dtype=np.int64).reshape(2, -1)
    n, e = x.shape[0], edge_index.shape[1]
    if n > max_nodes or e > max_edges:
        raise ValueError(
            f"The graph has {n} nodes and {e} edges but the observation holds at most "
            f"{max_nodes} and {max_edges}; raise max_nodes/max_edges or coarsen the graph."
        )
    if e and (edge_index.min() < 0 or edge_index.max() >= n):
        raise ValueError(f"edge_index refers to nodes outside [0, {n}).")
    out_x = np.zeros((max_nodes, x.shape[1]), np.float32)
    out_x[:n] = x
    out_e = np.zeros((2, max_edges), np.int64)
    out_e[:, :e] = edge_index
    node_mask = np.zeros(max_nodes, np.float32)
    node_mask[:n] = 1.0
    edge_mask = np.zeros(max_edges, np.float32)
    edge_mask[:e] = 1.0
    return {"x": out_x, "edge_index": out_e, "node_mask": node_mask, "edge_mask": edge_mask}


def _read_spaces(observation_space: gym.Space, action_space: gym.Space) -> Tuple[int, int, int, int]:
    expected = (
        "Dict(x: Box[N_max, F], edge_index: Box[2, E_max], node_mask: Box[N_max], "
        "edge_mask: Box[E_max])"
    )
    if not isinstance(observation_space, gym.spaces.Dict) or not {
        "x", "edge_index", "node_mask", "edge_mask"
    } <= set(observation_space.spaces):
        raise ValueError(
            f"HSDAGRLModule needs the observation space {expected} (see "
            f"policies.hsdag.placement_spaces); got {observation_space}."
        )
    max_nodes, num_features = observation_space["x"].shape
    max_edges = observation_space["edge_index"].shape[1]
    if not isinstance(action_space, gym.spaces.MultiDiscrete) or action_space.nvec.shape != (max_nodes,):
        raise ValueError(
            f"HSDAGRLModule needs the action space MultiDiscrete([D] * {max_nodes}); got {action_space}."
        )
    num_devices = int(action_space.nvec[0])
    GroupedPlacementDistribution.required_input_dim(action_space)  # checks equal nvec
    return int(max_nodes), int(num_features), int(max_edges), num_devices


# --------------------------------------------------------------------------------------
# The RLlib module
# --------------------------------------------------------------------------------------
class _StepOut(NamedTuple):
    dist_inputs: Tensor  # [B, N_max * (D + 1)]
    embedding: Tensor  # [B, H]
    next_state: Tensor  # [B, N_max, H]


class HSDAGRLModule(TorchRLModule, ValueFunctionAPI):
    """HSDAG as an RLlib ``TorchRLModule`` (new API stack), usable by REINFORCE-style
    learners and by PPO (it implements ``ValueFunctionAPI``).

    Spaces: see :func:`placement_spaces`. ``model_config`` keys: the fields of
    :class:`HSDAGConfig`; RLlib's ``max_seq_len`` (default 20) sets how many
    steps the learner back-propagates through the node-state recurrence.

    Outputs of every forward pass:

    - ``Columns.ACTION_DIST_INPUTS``: ``[B, (T,) N_max * (D + 1)]`` per-node group
      logits then per-node group ids (layout in :mod:`policies.distributions`);
    - ``Columns.STATE_OUT``: ``{"node_state": [B, N_max, H]}`` when stateful;
    - ``Columns.EMBEDDINGS`` (``forward_train``): ``[B, (T,) H]`` graph embeddings,
      re-used by :meth:`compute_values`.

    Observations may come with a time axis (``x`` of rank 4, as RLlib sends them
    to stateful modules) or without one (rank 3); ``Columns.STATE_IN`` may be
    left out for zeros (the start of an episode).

    Example::

        obs_space, act_space = placement_spaces(max_nodes=64, max_edges=128,
                                                num_features=16, num_devices=2)
        spec = RLModuleSpec(module_class=HSDAGRLModule, observation_space=obs_space,
                            action_space=act_space, model_config={"hidden_dim": 64})
    """

    @override(TorchRLModule)
    def setup(self) -> None:
        self._max_nodes, num_features, self._max_edges, self._num_devices = _read_spaces(
            self.observation_space, self.action_space
        )
        self.hsdag_config = HSDAGConfig.from_model_config(self.model_config)
        h = self.hsdag_config.hidden_dim
        self.net = HSDAGNet(num_features, self._num_devices, self.hsdag_config)
        self.value_head = _mlp(h, h, 1, 2)
        self.action_dist_cls = GroupedPlacementDistribution.for_devices(self._num_devices)
        self._warned_regroup = False

    @override(TorchRLModule)
    def get_initial_state(self) -> Dict[str, np.ndarray]:
        if not self.hsdag_config.node_state_update:
            return {}
        return {NODE_STATE: np.zeros((self._max_nodes, self.hsdag_config.hidden_dim), np.float32)}

    @override(TorchRLModule)
    def _forward(self, batch: Dict[str, Any], **kwargs) -> Dict[str, Any]:
        return self._act(batch, grouping_noise=0.0)

    @override(TorchRLModule)
    def _forward_exploration(self, batch: Dict[str, Any], **kwargs) -> Dict[str, Any]:
        # Sampling: the grouping is parsed with exploration noise (HSDAGConfig.grouping_noise).
        return self._act(batch, grouping_noise=self.hsdag_config.grouping_noise)

    def _act(self, batch: Dict[str, Any], grouping_noise: float) -> Dict[str, Any]:
        """Distribution inputs (and the next node state) for choosing actions."""
        dist_inputs, _, state_out = self._run(batch, reuse_grouping=False,
                                              grouping_noise=grouping_noise)
        out = {Columns.ACTION_DIST_INPUTS: dist_inputs}
        if state_out is not None:
            out[Columns.STATE_OUT] = state_out
        return out

    @override(TorchRLModule)
    def _forward_train(self, batch: Dict[str, Any], **kwargs) -> Dict[str, Any]:
        dist_inputs, embeddings, state_out = self._run(
            batch, reuse_grouping=self.hsdag_config.reuse_sampled_grouping
        )
        out = {Columns.ACTION_DIST_INPUTS: dist_inputs, Columns.EMBEDDINGS: embeddings}
        if state_out is not None:
            out[Columns.STATE_OUT] = state_out
        return out

    @override(ValueFunctionAPI)
    def compute_values(self, batch: Dict[str, Any], embeddings: Optional[Any] = None) -> Tensor:
        if embeddings is None:
            _, embeddings, _ = self._run(batch, reuse_grouping=self.hsdag_config.reuse_sampled_grouping)
        return self.value_head(embeddings).squeeze(-1)

    # -- internals -------------------------------------------------------------------
    def _run(
        self, batch: Mapping[str, Any], reuse_grouping: bool, grouping_noise: float = 0.0
    ) -> Tuple[Tensor, Tensor, Optional[Dict[str, Tensor]]]:
        raw_obs = batch[Columns.OBS]
        if not isinstance(raw_obs, Mapping):
            raise ValueError(
                "HSDAGRLModule needs the Dict observation (x, edge_index, node_mask, "
                "edge_mask) as a dict of tensors; do not flatten it (no "
                "FlattenObservations connector)."
            )
        obs = {k: torch.as_tensor(v) for k, v in raw_obs.items()}
        has_time = obs["x"].dim() == 4
        if not has_time:
            obs = {k: v.unsqueeze(1) for k, v in obs.items()}
        num_graphs, steps = obs["x"].shape[:2]
        device = obs["x"].device

        state = None
        if self.is_stateful():
            state_in = batch.get(Columns.STATE_IN)
            if state_in is not None and NODE_STATE in state_in:
                state = torch.as_tensor(state_in[NODE_STATE], device=device).float()
            else:
                state = torch.zeros(num_graphs, self._max_nodes, self.hsdag_config.hidden_dim, device=device)

        stored = None
        if reuse_grouping and batch.get(Columns.ACTION_DIST_INPUTS) is not None:
            stored_inputs = torch.as_tensor(batch[Columns.ACTION_DIST_INPUTS], device=device)
            if not has_time:
                stored_inputs = stored_inputs.unsqueeze(1)
            _, stored = unpack_dist_inputs(stored_inputs, self._num_devices)

        dist_inputs, embeddings = [], []
        for t in range(steps):
            out = self._step(
                {k: v[:, t] for k, v in obs.items()},
                state,
                stored[:, t] if stored is not None else None,
                grouping_noise,
            )
            dist_inputs.append(out.dist_inputs)
            embeddings.append(out.embedding)
            if state is not None:
                state = out.next_state
        dist = torch.stack(dist_inputs, 1)
        emb = torch.stack(embeddings, 1)
        if not has_time:
            dist, emb = dist.squeeze(1), emb.squeeze(1)
        return dist, emb, ({NODE_STATE: state} if state is not None else None)

    def _step(self, obs: Mapping[str, Tensor], state: Optional[Tensor], stored: Optional[Tensor],
              grouping_noise: float = 0.0) -> _StepOut:
        g = unpad_graphs(obs["x"].float(), obs["edge_index"], obs["node_mask"], obs["edge_mask"])
        flat_valid = g.node_valid.reshape(-1)
        node_state = None
        if state is not None:
            node_state = state.reshape(-1, state.size(-1))[flat_valid]
        assignment = self._stored_assignment(stored, g) if stored is not None else None

        out = self.net(g.x, g.edge_index, node_state=node_state, batch=g.batch,
                       num_graphs=g.num_graphs, assignment=assignment, grouping_noise=grouping_noise)
        groups_per_graph = torch.bincount(out.grouping.group_batch, minlength=g.num_graphs)
        first_group = torch.cumsum(groups_per_graph, 0) - groups_per_graph
        local = out.grouping.assignment - first_group[g.batch]
        dist_inputs = pack_dist_inputs(
            pad_node_values(out.node_logits, g.node_valid, 0.0),
            pad_node_values(local, g.node_valid, PADDED_GROUP),
        )
        next_state = pad_node_values(out.next_node_state, g.node_valid, 0.0)
        return _StepOut(dist_inputs, out.graph_embedding, next_state)

    def _stored_assignment(self, stored: Tensor, g: GraphBatch) -> Optional[Tensor]:
        """The union assignment of the sampled grouping, or ``None`` if it does not
        fit these observations (then the grouping is parsed afresh)."""
        local = stored[g.node_valid]
        if local.numel() == 0:
            return None
        if bool((local < 0).any()) or bool((local >= self._max_nodes).any()):
            if not self._warned_regroup:
                logger.warning(
                    "The stored action-distribution inputs do not match the observed "
                    "graphs; re-grouping instead of re-using the sampled grouping."
                )
                self._warned_regroup = True
            return None
        _, union = torch.unique(g.batch * (self._max_nodes + 1) + local, return_inverse=True)
        return union
