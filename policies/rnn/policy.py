r"""The RNN-based placer (Mirhoseini et al., ICML 2017) and its hierarchical
grouper (Mirhoseini et al., ICLR 2018) as a torch network.

The ops of the graph (its nodes after coarsening, in topological order) are
read as a sequence. Each op is embedded from the node features
(:mod:`hsdag_core.features`: op type, output shape, degrees, ...) and its
adjacency: the mean features of its producers and of its consumers are
concatenated with its own before a two-layer MLP. A bidirectional LSTM
encodes the sequence; an LSTM decoder with attention over the encoder's
outputs emits one device per op, autoregressively: the device it chose for
the previous op is fed back (as an embedding) with the encoder's output of
the current op. Nothing but this sequence model decides the placement, so one
placement is one sample of

.. math::

    \pi(a \mid G) = \prod_t \pi(a_t \mid a_{<t}, G).

With ``grouper`` on (the 2018 paper) a feed-forward grouper first assigns
every op to one of ``num_groups`` groups (a softmax per op, sampled); the
sequence is then the non-empty groups, ordered by their first op, each
embedded as the mean of its ops' embeddings and its size; every op takes its
group's device. The grouper is trained with the placer by the same REINFORCE
signal (its log-probability is part of the placement's). Grouping is also how
the 2018 paper keeps long graphs tractable: the decoder runs over at most
``num_groups`` steps.

Cost: the decoder runs one ``LSTMCell`` step per op (or group) and attends
over all encoder outputs, so a forward pass over a batch of ``B`` graphs of
``L`` steps keeps ``O(B * L * (L + H))`` activations for the backward pass
(``L`` = a few hundred ops: a few tens of MB), and takes ``L`` sequential
steps.

Sampling, greedy decoding and teacher forcing (the learner re-scores stored
actions) go through the same loop, so the logits a sample was drawn from are
exactly those the learner recomputes for it.
"""
from __future__ import annotations

from typing import NamedTuple, Optional

import torch
from torch import Tensor, nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from policies.distributions import representatives
from policies.layers import mlp
from policies.rnn.config import RNNPlacerConfig

__all__ = ["RNNPlacerConfig", "RNNPlacerNet", "PlacerOutput", "neighbour_means"]


class PlacerOutput(NamedTuple):
    """One forward pass over a batch of padded graphs ``[B, N_max]``.

    Attributes:
        actions: ``[B, N_max]`` long, the device of every node (0 at padding).
        node_logits: ``[B, N_max, D]`` the logits each node's device (or its
            group's) was decided from, conditioned on the decoded prefix.
        assignment: ``[B, N_max]`` group of every node (its own index without
            the grouper), ``-1`` at padding.
        group_logp: ``[B]`` log-probability of the grouping (0 without the grouper).
        group_entropy: ``[B]`` summed entropy of the grouper's softmaxes.
        embedding: ``[B, 2H]`` mean encoder output (a summary for a value head).
    """

    actions: Tensor
    node_logits: Tensor
    assignment: Tensor
    group_logp: Tensor
    group_entropy: Tensor
    embedding: Tensor


def neighbour_means(x: Tensor, edge_index: Tensor, edge_mask: Tensor) -> tuple[Tensor, Tensor]:
    """Mean features of each node's producers and of its consumers.

    Args:
        x: ``[B, N, F]`` padded node features.
        edge_index: ``[B, 2, E]`` edges ``src -> dst`` (node slots).
        edge_mask: ``[B, E]`` 1 for real edges.

    Returns:
        ``(mean over in-neighbours, mean over out-neighbours)``, each ``[B, N, F]``
        (zeros for a node without any).
    """
    b, n, f = x.shape
    flat = x.reshape(b * n, f)
    real = edge_mask > 0.5
    offset = (torch.arange(b, device=x.device) * n).unsqueeze(1).expand_as(real)
    src = (edge_index[:, 0].long() + offset)[real]
    dst = (edge_index[:, 1].long() + offset)[real]
    out = []
    for to, frm in ((dst, src), (src, dst)):
        total = flat.new_zeros(b * n, f).index_add_(0, to, flat[frm])
        count = flat.new_zeros(b * n).index_add_(0, to, torch.ones_like(to, dtype=flat.dtype))
        out.append((total / count.clamp_min(1.0).unsqueeze(1)).reshape(b, n, f))
    return out[0], out[1]


class RNNPlacerNet(nn.Module):
    """Embedding, optional grouper, bidirectional LSTM encoder, attentional
    LSTM decoder (see the module docstring)."""

    def __init__(self, num_features: int, num_devices: int, config: RNNPlacerConfig) -> None:
        super().__init__()
        h = config.hidden_dim
        self.config, self.num_devices = config, num_devices
        self.embed = mlp(3 * num_features, h, h, 2)
        self.grouper = mlp(h, h, config.num_groups, 2) if config.grouper else None
        self.unit_in = nn.Linear(h + 1, h)  # a unit's mean embedding and log size
        self.encoder = nn.LSTM(h, h, batch_first=True, bidirectional=True)
        self.init_h = nn.Linear(2 * h, h)
        self.init_c = nn.Linear(2 * h, h)
        self.device_embed = nn.Embedding(num_devices + 1, h)  # index D: start of sequence
        self.decoder = nn.LSTMCell(3 * h, h)
        self.attn = nn.Linear(h, 2 * h, bias=False)
        self.head = mlp(3 * h, h, num_devices, 2)
        for last in [self.head[-1]] + ([self.grouper[-1]] if self.grouper is not None else []):
            nn.init.normal_(last.weight, std=config.out_scale / (last.in_features ** 0.5))
            nn.init.zeros_(last.bias)

    # ------------------------------------------------------------------ grouping
    def _grouping(self, emb: Tensor, valid: Tensor, assignment: Optional[Tensor], greedy: bool,
                  generator: Optional[torch.Generator]) -> tuple[Tensor, Tensor, Tensor]:
        b, n = valid.shape
        if self.grouper is None:
            own = torch.arange(n, device=emb.device).expand(b, n)
            zero = emb.new_zeros(b)
            return torch.where(valid, own, torch.full_like(own, -1)), zero, zero
        logits = self.grouper(emb)[..., :n]  # group ids must stay below N_max
        logp_all = torch.log_softmax(logits, -1)
        if assignment is None:
            if greedy:
                assignment = logits.argmax(-1)
            else:
                probs = logp_all.exp().reshape(b * n, -1)
                assignment = torch.multinomial(probs, 1, generator=generator).reshape(b, n)
        assignment = torch.where(valid, assignment.long(), torch.full_like(assignment.long(), -1))
        picked = logp_all.gather(-1, assignment.clamp_min(0).unsqueeze(-1)).squeeze(-1)
        entropy = -(logp_all.exp() * logp_all).sum(-1)
        return assignment, (picked * valid).sum(-1), (entropy * valid).sum(-1)

    # ------------------------------------------------------------------- forward
    def forward(self, x: Tensor, edge_index: Tensor, node_mask: Tensor, edge_mask: Tensor, *,
                actions: Optional[Tensor] = None, assignment: Optional[Tensor] = None,
                greedy: bool = False, generator: Optional[torch.Generator] = None) -> PlacerOutput:
        """Place a batch of padded graphs.

        Args:
            x, edge_index, node_mask, edge_mask: the padded observation
                (:mod:`envs.observation`), batched ``[B, ...]``.
            actions: ``[B, N_max]`` devices to score (teacher forcing); ``None``
                to decode (sample, or argmax with ``greedy``).
            assignment: ``[B, N_max]`` grouping to score (with the grouper);
                ``None`` to sample (or argmax) one.
            generator: random generator of the samples.
        """
        valid = node_mask > 0.5
        b, n = valid.shape
        x = x.float() * valid.unsqueeze(-1)
        ins, outs = neighbour_means(x, edge_index, edge_mask)
        emb = self.embed(torch.cat([x, ins, outs], -1))
        assignment, group_logp, group_entropy = self._grouping(emb, valid, assignment, greedy, generator)

        # units (ops, or non-empty groups) in the order of their first node
        rep_index, is_rep = representatives(assignment)
        lengths = is_rep.sum(-1).clamp_min(1)
        steps = int(lengths.max())
        rank = torch.cumsum(is_rep.long(), -1) - 1
        unit_of_node = torch.where(valid, rank.gather(-1, rep_index), torch.full_like(rank, steps))
        sums = emb.new_zeros(b, steps + 1, emb.shape[-1]).scatter_add_(
            1, unit_of_node.unsqueeze(-1).expand_as(emb), emb * valid.unsqueeze(-1))
        sizes = emb.new_zeros(b, steps + 1).scatter_add_(1, unit_of_node, valid.to(emb.dtype))
        sums, sizes = sums[:, :steps], sizes[:, :steps]
        unit_x = torch.relu(self.unit_in(torch.cat(
            [sums / sizes.clamp_min(1.0).unsqueeze(-1), torch.log1p(sizes).unsqueeze(-1)], -1)))
        unit_valid = torch.arange(steps, device=x.device).unsqueeze(0) < lengths.unsqueeze(1)

        packed = pack_padded_sequence(unit_x, lengths.cpu(), batch_first=True, enforce_sorted=False)
        enc_packed, (h_n, c_n) = self.encoder(packed)
        enc, _ = pad_packed_sequence(enc_packed, batch_first=True, total_length=steps)  # [B, L, 2H]
        h = torch.tanh(self.init_h(torch.cat([h_n[0], h_n[1]], -1)))
        c = self.init_c(torch.cat([c_n[0], c_n[1]], -1))

        forced = None
        if actions is not None:  # each unit's device is its first node's
            rep_pos = torch.zeros(b, steps + 1, dtype=torch.long, device=x.device)
            slot = torch.where(is_rep, rank, torch.full_like(rank, steps))
            rep_pos.scatter_(1, slot, torch.arange(n, device=x.device).expand(b, n))
            forced = actions.long().gather(1, rep_pos[:, :steps]).clamp(0, self.num_devices - 1)

        prev = torch.full((b,), self.num_devices, dtype=torch.long, device=x.device)
        masked = ~unit_valid
        unit_logits, unit_actions = [], []
        for t in range(steps):
            h, c = self.decoder(torch.cat([enc[:, t], self.device_embed(prev)], -1), (h, c))
            scores = torch.bmm(enc, self.attn(h).unsqueeze(-1)).squeeze(-1)
            weights = torch.softmax(scores.masked_fill(masked, float("-inf")), -1)
            context = torch.bmm(weights.unsqueeze(1), enc).squeeze(1)
            logits = self.head(torch.cat([h, context], -1))
            if forced is not None:
                a = forced[:, t]
            elif greedy:
                a = logits.argmax(-1)
            else:
                a = torch.multinomial(torch.softmax(logits, -1), 1, generator=generator).squeeze(-1)
            unit_logits.append(logits)
            unit_actions.append(a)
            prev = a
        unit_logits_t = torch.stack(unit_logits, 1)  # [B, L, D]
        unit_actions_t = torch.stack(unit_actions, 1)  # [B, L]

        idx = unit_of_node.clamp_max(steps - 1)
        node_logits = unit_logits_t.gather(1, idx.unsqueeze(-1).expand(b, n, self.num_devices))
        node_logits = node_logits * valid.unsqueeze(-1)
        node_actions = torch.where(valid, unit_actions_t.gather(1, idx), torch.zeros_like(idx))
        embedding = (enc * unit_valid.unsqueeze(-1)).sum(1) / lengths.unsqueeze(-1).to(enc.dtype)
        return PlacerOutput(node_actions, node_logits, assignment, group_logp, group_entropy,
                            embedding)
