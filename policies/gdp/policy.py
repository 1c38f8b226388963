r"""GDP's policy network (Zhou et al., "GDP: Generalized Device Placement for
Dataflow Graphs", 2019): GraphSAGE node embeddings, a segment-recurrent
attention placer that places every node in one shot, and a superposition
network that conditions the placer on the graph.

With :math:`\mathbf{x}_v` the node features, ``H`` the width (``hidden_dim``)
and nodes indexed in topological order (as every placement observation is,
see :mod:`envs.observation`):

1. **Node embeddings (GraphSAGE).** :math:`\mathbf{h}^{(0)}_v = \mathrm{Linear}(\mathbf{x}_v)`,
   then ``sage_layers`` rounds of
   :math:`\mathbf{h}^{(k+1)}_v = \mathrm{LN}(\mathbf{h}^{(k)}_v + \mathrm{ReLU}(
   \mathbf{W}^k_1 \mathbf{h}^{(k)}_v + \mathbf{W}^k_2 \operatorname{mean}_{u \in N(v)} \mathbf{h}^{(k)}_u))`
   (:class:`~torch_geometric.nn.SAGEConv`) over the graph's edges taken both
   ways, so a node sees its producers and its consumers.
2. **Graph embedding.** :math:`\mathbf{g} = \mathrm{MLP}(\operatorname{mean}_v \mathbf{h}_v)`
   per graph: it feeds the superposition network and the value head.
3. **Placer: segment-level recurrent attention (Transformer-XL style).** The
   node sequence (topological order) is cut into segments of ``segment_len``
   nodes. In every one of ``attention_layers`` pre-norm layers a segment
   attends to itself and to the *memory*: that layer's input on the previous
   segment, detached from the gradient. Self-attention thus costs
   ``O(S * 2S)`` per segment and ``O(N * S)`` in all instead of ``O(N^2)``, and
   information still flows ``attention_layers`` segments forward. A learned
   vector marks memory keys apart from the segment's own (the relative
   position that matters here: earlier segment or this one); the absolute
   position is a node feature.
4. **Superposition network.** The paper conditions the placer on the graph
   embedding so one policy serves many graphs. Here each attention layer ``l``
   is modulated feature-wise by the graph (FiLM):
   :math:`\mathbf{z} \leftarrow \mathbf{z} \odot (1 + \boldsymbol{\gamma}_l(\mathbf{g})) + \boldsymbol{\beta}_l(\mathbf{g})`,
   with :math:`\boldsymbol{\gamma}_l, \boldsymbol{\beta}_l` linear maps of
   :math:`\mathbf{g}` initialised to zero (the network starts as the
   unconditioned placer). This is the paper's "weights as a function of the
   graph embedding" restricted to per-feature gains and offsets, which keeps
   the parameter count independent of the graph and of ``H^2``.
5. **Policy.** :math:`\mathrm{logits}_v = \mathrm{MLP}(\mathrm{LN}(\mathbf{z}_v)) \in \mathbb{R}^D`,
   one independent categorical per node (one action places every node); the
   last layer starts small (``POLICY_INIT_SCALE``) so the first policy is
   near uniform.

No parameter depends on the number of nodes, edges or segments: one network
places graphs of any size, which pre-training over many graphs needs.

Shapes: a batch of ``B`` graphs arrives padded (``x [B, N_max, F]``,
``node_mask [B, N_max]``) with the edges of the disjoint union
(:func:`envs.observation.unpad_graphs`).
"""
from __future__ import annotations

from typing import NamedTuple, Optional

import torch
from torch import Tensor, nn
from torch_geometric.nn import SAGEConv
from torch_geometric.utils import scatter

from policies.layers import mlp
from policies.gdp.config import GDPConfig

__all__ = ["GDPConfig", "GDPNet", "GDPOutput", "SegmentRecurrentPlacer", "POLICY_INIT_SCALE"]

#: scale of the policy's last layer at initialisation (a near-uniform first policy)
POLICY_INIT_SCALE = 0.01


class GDPOutput(NamedTuple):
    """What :class:`GDPNet` returns.

    Attributes:
        node_logits: ``[B, N_max, D]`` (padded slots hold zeros).
        graph_embedding: ``[B, H]``.
    """

    node_logits: Tensor
    graph_embedding: Tensor


class _XLLayer(nn.Module):
    """One pre-norm attention layer over a segment and the previous segment's memory."""

    def __init__(self, h: int, heads: int) -> None:
        super().__init__()
        self.norm_q = nn.LayerNorm(h)
        self.norm_kv = nn.LayerNorm(h)
        self.attn = nn.MultiheadAttention(h, heads, batch_first=True)
        self.norm_ff = nn.LayerNorm(h)
        self.ff = mlp(h, 2 * h, h, 2)
        self.memory_tag = nn.Parameter(torch.zeros(h))

    def forward(self, seg: Tensor, seg_pad: Tensor, mem: Tensor, mem_pad: Tensor) -> Tensor:
        """``seg [b, S, H]`` attends to ``[mem, seg]``; ``*_pad [b, S]`` True on padding."""
        q = self.norm_q(seg)
        kv = torch.cat([self.norm_kv(mem) + self.memory_tag, self.norm_kv(seg)], 1)
        pad = torch.cat([mem_pad, seg_pad], 1)
        # a graph with nothing real in this window attends to its padding (outputs unused)
        pad = pad & ~pad.all(1, keepdim=True)
        a, _ = self.attn(q, kv, kv, key_padding_mask=pad, need_weights=False)
        z = seg + a
        return z + self.ff(self.norm_ff(z))


class SegmentRecurrentPlacer(nn.Module):
    """Transformer-XL style encoder over long node sequences (see the module docstring).

    Args:
        hidden_dim: ``H``.
        layers: attention layers.
        heads: attention heads.
        segment_len: ``S``.
    """

    def __init__(self, hidden_dim: int, layers: int, heads: int, segment_len: int) -> None:
        super().__init__()
        self.segment_len = segment_len
        self.layers = nn.ModuleList(_XLLayer(hidden_dim, heads) for _ in range(layers))

    def forward(self, h: Tensor, valid: Tensor, film: Optional[Tensor] = None) -> Tensor:
        """Encodes ``h [B, N, H]`` (``valid [B, N]`` bool) segment by segment.

        A segment's memory in layer ``l`` is layer ``l``'s input on the
        previous segment, which is known for every segment once layer ``l - 1``
        is done; so each layer runs on all segments at once (a batch of
        ``B * ceil(N / S)`` segments of ``S`` queries and ``2S`` keys), with
        the same result as going segment by segment.

        Args:
            film: ``[B, layers, 2, H]`` per-layer gains and offsets, or ``None``.

        Returns:
            ``[B, N, H]``.
        """
        if not self.layers:
            return h
        b, n, width = h.shape
        s = self.segment_len
        k = -(-n // s)  # segments per graph
        if k * s > n:
            h = torch.nn.functional.pad(h, (0, 0, 0, k * s - n))
            valid = torch.nn.functional.pad(valid, (0, k * s - n), value=False)
        pad = ~valid.reshape(b, k, s)
        seg_pad = pad.reshape(b * k, s)
        # the first segment of a graph has no memory: all its memory slots are padding
        mem_pad = torch.cat([torch.ones_like(pad[:, :1]), pad[:, :-1]], 1).reshape(b * k, s)
        z = h.reshape(b * k, s, width)
        for i, layer in enumerate(self.layers):
            prev = z.detach().reshape(b, k, s, width)
            mem = torch.cat([torch.zeros_like(prev[:, :1]), prev[:, :-1]], 1).reshape(b * k, s, width)
            z = layer(z, seg_pad, mem, mem_pad)
            if film is not None:
                gain = film[:, i, 0].repeat_interleave(k, 0).unsqueeze(1)
                offset = film[:, i, 1].repeat_interleave(k, 0).unsqueeze(1)
                z = z * (1.0 + gain) + offset
        return z.reshape(b, k * s, width)[:, :n]


class GDPNet(nn.Module):
    """GDP's network: GraphSAGE, graph embedding, superposition, segment-recurrent placer.

    Args:
        num_features: ``F``.
        num_devices: ``D``.
        config: :class:`GDPConfig`.
    """

    def __init__(self, num_features: int, num_devices: int, config: GDPConfig = GDPConfig()) -> None:
        super().__init__()
        self.config = c = config
        h = c.hidden_dim
        self.input = nn.Linear(num_features, h)
        self.sage = nn.ModuleList(SAGEConv(h, h, aggr="mean") for _ in range(c.sage_layers))
        self.sage_norms = nn.ModuleList(nn.LayerNorm(h) for _ in range(c.sage_layers))
        self.graph_mlp = mlp(h, h, h, 2)
        self.film = nn.Linear(h, c.attention_layers * 2 * h) if c.superposition else None
        self.placer = SegmentRecurrentPlacer(h, c.attention_layers, c.heads, c.segment_len)
        self.out_norm = nn.LayerNorm(h)
        self.policy = mlp(h, h, num_devices, 2)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.LayerNorm, SAGEConv)):
                m.reset_parameters()
        if self.film is not None:
            nn.init.zeros_(self.film.weight)
            nn.init.zeros_(self.film.bias)
        last = self.policy[-1]
        with torch.no_grad():
            last.weight.mul_(POLICY_INIT_SCALE)
            last.bias.zero_()

    @torch.no_grad()
    def soften(self, factor: float) -> None:
        """Scales the policy's last layer by ``factor``: every node's logits keep their
        order (the greedy placement stays) but lose ``1 - factor`` of their spread."""
        self.policy[-1].weight.mul_(factor)
        self.policy[-1].bias.mul_(factor)

    def node_embeddings(self, x: Tensor, edge_index: Tensor) -> Tensor:
        """GraphSAGE embeddings ``[n, H]`` of the union's nodes ``x [n, F]``."""
        h = torch.relu(self.input(x))
        both = torch.cat([edge_index, edge_index.flip(0)], 1)
        for conv, norm in zip(self.sage, self.sage_norms):
            h = norm(h + torch.relu(conv(h, both)))
        return h

    def forward(self, x: Tensor, edge_index: Tensor, batch: Tensor, node_valid: Tensor) -> GDPOutput:
        """Logits for every node of a batch of graphs.

        Args:
            x: ``[n, F]`` features of the union's nodes.
            edge_index: ``[2, n_e]`` union edges.
            batch: ``[n]`` graph of each node.
            node_valid: ``[B, N_max]`` bool, which padded slots the union's nodes fill
                (row-major), as :func:`envs.observation.unpad_graphs` returns.
        """
        z, g = self.encode(x, edge_index, batch, node_valid)
        logits = self.policy(self.out_norm(z))
        return GDPOutput(logits * node_valid.unsqueeze(-1), g)

    def encode(self, x: Tensor, edge_index: Tensor, batch: Tensor, node_valid: Tensor
               ) -> tuple[Tensor, Tensor]:
        """Steps 1-4 of the module docstring: the placer's node vectors ``z [B, N_max, H]``
        (before its output norm) and the graph embeddings ``g [B, H]``; :meth:`forward`'s
        arguments."""
        num_graphs, max_nodes = node_valid.shape
        h = self.node_embeddings(x, edge_index)
        g = self.graph_mlp(scatter(h, batch, 0, dim_size=num_graphs, reduce="mean"))
        padded = h.new_zeros(num_graphs * max_nodes, h.shape[1])
        padded[node_valid.reshape(-1)] = h
        padded = padded.reshape(num_graphs, max_nodes, -1)
        film = None
        if self.film is not None:
            film = self.film(g).reshape(num_graphs, self.config.attention_layers, 2, -1)
        return self.placer(padded, node_valid, film), g
