r"""Placeto's policy network (Addanki et al., "Placeto: Learning Generalizable
Device Placement Algorithms for Distributed Machine Learning", NeurIPS 2019).

Placeto places one node per step (:mod:`envs.placeto_env`); the network turns
the graph with its current placement into logits over the ``D`` devices for
the current node ``c``. With :math:`\mathbf{x}_v` the node features, ``K``
rounds (``rounds``) and ``H`` the width (``hidden_dim``):

1. **Input.** :math:`\mathbf{h}^{(0)}_v = \mathrm{MLP}(\mathbf{x}_v) \in \mathbb{R}^H`.
2. **Message passing along the DAG, both ways, separate networks.** Forward
   (messages from parents to children), ``K`` rounds of
   :math:`\mathbf{f}^{(k+1)}_v = \mathrm{LN}(\mathbf{f}^{(k)}_v + \mathrm{ReLU}(
   \mathbf{W}^{f,k}_1 \mathbf{f}^{(k)}_v + \mathbf{W}^{f,k}_2
   \operatorname{mean}_{u \in \mathrm{parents}(v)} \mathbf{f}^{(k)}_u))`
   (:class:`~torch_geometric.nn.SAGEConv`), from :math:`\mathbf{f}^{(0)} = \mathbf{h}^{(0)}`;
   backward the same over children with weights of its own, giving
   :math:`\mathbf{b}^{(K)}`. After ``K`` rounds :math:`\mathbf{f}_v` depends on
   exactly the nodes with a path of at most ``K`` edges to ``v`` (and ``v``),
   :math:`\mathbf{b}_v` on those ``v`` reaches in at most ``K`` edges. The
   node embedding is
   :math:`\mathbf{z}_v = \mathrm{Linear}([\mathbf{h}^{(0)}_v, \mathbf{f}^{(K)}_v, \mathbf{b}^{(K)}_v])`.
   (The paper propagates in one sweep in topological order, so a node sees all
   its ancestors; ``K`` rounds of layer-wise passing batch over graphs and
   steps, and with ``K`` about the graph's depth in coarsened nodes reach as far.)
3. **Aggregation around the current node.** The nodes split into the
   ancestors :math:`A(c)`, the descendants :math:`S(c)` and the parallel nodes
   :math:`P(c)` (neither, ``c`` excluded); each set's embeddings are averaged
   (zero for an empty set) and concatenated with ``c``'s own:
   :math:`\mathbf{e}_c = [\mathbf{z}_c, \bar{\mathbf{z}}_{A(c)}, \bar{\mathbf{z}}_{S(c)}, \bar{\mathbf{z}}_{P(c)}] \in \mathbb{R}^{4H}`.
   Means rather than sums keep the scale independent of the graph's size.
4. **Policy.** :math:`\mathrm{logits}_c = \mathrm{MLP}(\mathrm{LN}(\mathbf{e}_c)) \in \mathbb{R}^D`.

Shapes: a batch of ``B`` graphs is one disjoint union (torch-geometric style)
of ``n`` nodes with ``edge_index [2, e]`` and ``batch [n]``; ``current [B]`` is
each graph's current node as an index into the union, ``ancestors`` and
``descendants`` ``[n]`` bool masks relative to it.
"""
from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor, nn
from torch_geometric.nn import SAGEConv
from torch_geometric.utils import scatter

from policies.layers import mlp
from policies.placeto.config import PlacetoConfig

#: scale of the policy's last layer at initialisation (see :meth:`PlacetoNet.reset_parameters`)
POLICY_INIT_SCALE = 0.01

__all__ = ["POLICY_INIT_SCALE", "PlacetoConfig", "PlacetoNet", "PlacetoOutput", "NodeEmbedding", "DirectedPassing",
           "split_around"]


class NodeEmbedding(NamedTuple):
    """Per-node embeddings ``[n, H]``: the input's, the forward and backward
    passes' and their combination ``z``."""

    own: Tensor
    forward: Tensor
    backward: Tensor
    z: Tensor


class PlacetoOutput(NamedTuple):
    """``logits [B, D]`` for each graph's current node, the policy's input
    ``embedding [B, 4H]`` and the ``nodes`` embeddings."""

    logits: Tensor
    embedding: Tensor
    nodes: NodeEmbedding


class DirectedPassing(nn.Module):
    """``rounds`` rounds of mean-aggregated message passing along directed
    edges (``src -> dst``: each node hears its in-neighbours), each a
    :class:`~torch_geometric.nn.SAGEConv` with a residual, ReLU and LayerNorm."""

    def __init__(self, hidden_dim: int, rounds: int) -> None:
        super().__init__()
        self.convs = nn.ModuleList(SAGEConv(hidden_dim, hidden_dim, aggr="mean")
                                   for _ in range(rounds))
        self.norms = nn.ModuleList(nn.LayerNorm(hidden_dim) for _ in range(rounds))

    def reset_parameters(self) -> None:
        for conv, norm in zip(self.convs, self.norms):
            conv.reset_parameters()
            norm.reset_parameters()

    def forward(self, h: Tensor, edge_index: Tensor) -> Tensor:
        """``h [n, H]``, ``edge_index [2, e]`` -> ``[n, H]``."""
        for conv, norm in zip(self.convs, self.norms):
            h = norm(h + torch.relu(conv(h, edge_index)))
        return h


def split_around(current: Tensor, ancestors: Tensor, descendants: Tensor,
                 num_nodes: int) -> tuple[Tensor, Tensor, Tensor]:
    """The ancestors, descendants and parallel nodes of each current node, as ``[n]``
    bool masks over the union: parallel = neither ancestor, descendant nor current.

    Args:
        current: ``[B]`` union index of each graph's current node.
        ancestors / descendants: ``[n]`` masks (any dtype; nonzero = member).
        num_nodes: ``n``.
    """
    anc = ancestors.bool()
    desc = descendants.bool()
    is_current = torch.zeros(num_nodes, dtype=torch.bool, device=anc.device)
    is_current[current] = True
    if bool((anc & desc).any()) or bool((is_current & (anc | desc)).any()):
        raise ValueError("a node is both an ancestor and a descendant of the current node, or "
                         "the current node is its own ancestor/descendant: the graph is not a DAG "
                         "or the masks do not belong to the current node")
    return anc, desc, ~(anc | desc | is_current)


class PlacetoNet(nn.Module):
    """Placeto's graph embedding and policy (see the module docstring)."""

    def __init__(self, num_features: int, num_devices: int,
                 config: PlacetoConfig = PlacetoConfig()) -> None:
        super().__init__()
        if num_features < 1 or num_devices < 1:
            raise ValueError("num_features and num_devices must be at least 1")
        self.config = config
        h = config.hidden_dim
        self.encode = mlp(num_features, h, h, 2)
        self.forward_passing = DirectedPassing(h, config.rounds)
        self.backward_passing = DirectedPassing(h, config.rounds)
        self.combine = nn.Linear(3 * h, h)
        self.norm = nn.LayerNorm(4 * h)
        self.policy = mlp(4 * h, h, num_devices, 2)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Default initialisation, except the policy's last layer: weights scaled by
        :data:`POLICY_INIT_SCALE` and zero bias, so the first policy is close to
        uniform and Adam's first steps (about ``lr`` per weight whatever the
        gradient) cannot swing it to one device (as PPO implementations
        initialise their policy heads)."""
        for m in self.modules():
            if m is not self and hasattr(m, "reset_parameters") and not isinstance(m, PlacetoNet):
                m.reset_parameters()
        last = self.policy[-1]
        with torch.no_grad():
            last.weight.mul_(POLICY_INIT_SCALE)
            last.bias.zero_()

    def embed(self, x: Tensor, edge_index: Tensor) -> NodeEmbedding:
        """Node embeddings of a union of graphs (``x [n, F]``, ``edge_index [2, e]``)."""
        own = self.encode(x)
        fwd = self.forward_passing(own, edge_index)
        bwd = self.backward_passing(own, edge_index.flip(0))
        return NodeEmbedding(own, fwd, bwd, self.combine(torch.cat([own, fwd, bwd], dim=-1)))

    def forward(self, x: Tensor, edge_index: Tensor, batch: Tensor, num_graphs: int,
                current: Tensor, ancestors: Tensor, descendants: Tensor) -> PlacetoOutput:
        """Logits ``[B, D]`` of each graph's current node (shapes: module docstring)."""
        n = x.shape[0]
        if current.shape != (num_graphs,):
            raise ValueError(f"current must hold one node per graph ({num_graphs}), got "
                             f"shape {tuple(current.shape)}")
        nodes = self.embed(x, edge_index)
        z = nodes.z
        parts = [z[current]]
        for mask in split_around(current, ancestors, descendants, n):
            parts.append(scatter(z[mask], batch[mask], dim=0, dim_size=num_graphs, reduce="mean"))
        embedding = torch.cat(parts, dim=-1)
        return PlacetoOutput(self.policy(self.norm(embedding)), embedding, nodes)
