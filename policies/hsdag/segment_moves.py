r"""Grouped placement with node moves and segment moves: a short run of nodes set at once.

:mod:`policies.hsdag.move_distribution` lets single nodes leave their group's
device. Some optima differ from a good placement in several nodes at once,
none of which pays alone: on ResNet-50 with a 64 MB accelerator the optimum
takes two medium layers (and their Adds) off the accelerator and puts one
large layer on it, and every single move on the way overflows the memory or is
slower.
This distribution adds a third decision, after the groups' devices and the moves:

3. with a learned probability, one *segment* is set to one device: a start
   node :math:`i` (a categorical over the nodes and "no segment", the nodes'
   logits from a head on their node state, together about
   :data:`SEGMENT_SHARE` at the start), a length :math:`L` uniform in
   ``2..SEGMENT_MAX_LEN`` (cut at the graph's last node) and a device
   :math:`d` uniform over the ``D`` devices; nodes :math:`i .. i+L-1` (in
   topological order, the graph's node order) all go to :math:`d`, whatever
   their group and move decisions were (annealing's block move,
   :class:`policies.search.local.SimulatedAnnealing`, learned).

``logp`` is exact: the segment is not stored with the action, so it is the
mixture over "no segment" and every segment the action is constant on,

.. math::
    p(a) = p_\varnothing\, p_{base}(a) + \sum_{i, L} p_i \frac{1}{L_{max} - 1}
        \frac{1}{D}\, [a_{i..i+L-1} \text{ constant}]\, p_{base}(a_{\setminus i..i+L-1})

where :math:`p_{base}(a_{\setminus S})` is the grouped-move marginal
(:meth:`~policies.hsdag.move_distribution.GroupedMoveDistribution.marginal`) with the
segment's nodes left out of their groups' products (a group's device still
sums to one over them). It costs ``N * (SEGMENT_MAX_LEN - 1)`` evaluations of
the base marginal per placement, so the option is meant for graphs of up to a
few hundred (coarsened) nodes. ``entropy`` and ``kl`` add the start
categorical's to the base distribution's (a bonus, not the placement's exact
entropy).

**Measured (off by default).** ``bench/bench_learning.py -- --segment-moves``,
simulator, 64 MB accelerator, best/optimum at 200 / 500 placements, median
over seeds, without -> with segments, both run side by side. Profile 1 (5
seeds): ResNet-50 1.017 / 1.017 -> 1.018 / 1.018 (one seed reached the optimum
at 500, one ended at 1.12), Inception-V3 1.045 / 1.040 -> 1.123 / 1.063, BERT-
base 1.153 / 1.103 -> 1.147 / 1.132. Profile 2 (3 seeds): ResNet-50 1.76 /
1.72 -> 1.66 / 1.50, Inception-V3 1.76 / 1.65 -> 1.78 / 1.60, BERT-base 1.32 /
1.26 -> 1.38 / 1.19 (annealing: 1.007, 1.43, 1.49 at 500). The unlimited
accelerator stays at 1.00-1.01. Models outside the zoo (profile 1, 3 seeds, at
500) get worse: DistilBERT 64 MB 1.257 -> 1.341, GPT-2 64 MB 1.121 -> 1.214,
MobileNet-V3 1.000 -> 1.059 (EfficientNet-B0 1.066 -> 1.062). Why ResNet-50's
gap on profile 1 stays: from HSDAG's best there, no segment set to one device
(nor flipped) is faster; the optimum takes two medium layers and their Adds
off the accelerator and puts one large layer on it, three separate changes
whose every one-change step overflows or is slower (profile 2's gap has the
same shape).

Input layout (``N_max * (D + 3)``): :mod:`policies.hsdag.move_distribution`'s
(``N_max * (D + 2)``), then ``N_max`` segment-start logits; "no segment" has
logit ``0``.
"""
from __future__ import annotations

import math
from typing import Optional, Tuple

import gymnasium as gym
import torch
from torch import Tensor, nn

from policies.distributions import bind_devices, bound_by_name, unpack_dist_inputs
from policies.layers import mlp, reset_sequential
from policies.hsdag.move_distribution import GroupedMoveDistribution, split_move_inputs

__all__ = ["SEGMENT_MAX_LEN", "SEGMENT_SHARE", "SegmentMoveDistribution", "SegmentHead",
           "pack_segment_inputs", "split_segment_inputs"]

#: longest segment (nodes)
SEGMENT_MAX_LEN = 8
#: probability of a segment move at the start (all start logits equal)
SEGMENT_SHARE = 0.3


def pack_segment_inputs(move_inputs: Tensor, start_logits: Tensor) -> Tensor:
    """``[..., N_max * (D + 3)]``: grouped-move inputs then segment-start logits."""
    return torch.cat([move_inputs, start_logits.to(move_inputs.dtype)], dim=-1)


def split_segment_inputs(inputs: Tensor, num_devices: int) -> Tuple[Tensor, Tensor]:
    """Inverse of :func:`pack_segment_inputs`: ``(grouped-move inputs, start logits [..., N_max])``."""
    width = inputs.shape[-1]
    if width % (num_devices + 3) != 0:
        raise ValueError(f"Inputs of width {width} cannot hold N_max * ({num_devices} + 3) values "
                         "of a grouped placement with segment moves; check the RLModule.")
    n = width // (num_devices + 3)
    return inputs[..., : n * (num_devices + 2)], inputs[..., n * (num_devices + 2):]


class SegmentHead(nn.Module):
    """Segment-start logits from node states: an MLP plus a per-graph prior that
    makes all starts together :data:`SEGMENT_SHARE` likely at initialisation."""

    def __init__(self, hidden_dim: int) -> None:
        super().__init__()
        self.mlp = mlp(hidden_dim, hidden_dim, 1, 2)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        reset_sequential(self.mlp)
        nn.init.zeros_(self.mlp[-1].weight)
        nn.init.zeros_(self.mlp[-1].bias)

    def forward(self, z: Tensor, batch: Tensor, num_graphs: int) -> Tensor:
        n = torch.bincount(batch, minlength=num_graphs).to(z.dtype).clamp_min(1.0)[batch]
        prior = math.log(SEGMENT_SHARE / (1 - SEGMENT_SHARE)) - torch.log(n)
        return self.mlp(z).squeeze(-1) + prior


def _segment_masks(n: int, device) -> Tuple[Tensor, Tensor]:
    """``(in_segment [S, N] bool, start [S] long)`` of every (start, length) pair."""
    starts = torch.arange(n, device=device).repeat_interleave(SEGMENT_MAX_LEN - 1)
    lengths = torch.arange(2, SEGMENT_MAX_LEN + 1, device=device).repeat(n)
    nodes = torch.arange(n, device=device)
    inside = (nodes >= starts[:, None]) & (nodes < (starts + lengths)[:, None])
    return inside, starts


class SegmentMoveDistribution(GroupedMoveDistribution):
    """Groups, node moves, then at most one segment set to one device.

    Args:
        logits / assignment / move_logits: as :class:`GroupedMoveDistribution`.
        start_logits: ``[..., N_max]`` segment-start logits ("no segment": 0).
    """

    def __init__(self, logits: Tensor, assignment: Tensor, move_logits: Tensor,
                 start_logits: Tensor) -> None:
        super().__init__(logits=logits, assignment=assignment, move_logits=move_logits)
        self.start_logits = start_logits

    @classmethod
    def for_devices(cls, num_devices: int) -> type["SegmentMoveDistribution"]:
        return bind_devices(SegmentMoveDistribution, int(num_devices))

    @classmethod
    def from_logits(cls, logits: Tensor, num_devices: Optional[int] = None,
                    **kwargs) -> "SegmentMoveDistribution":
        d = num_devices if num_devices is not None else cls.num_devices
        if d is None:
            raise ValueError("SegmentMoveDistribution needs the number of devices: use "
                             "SegmentMoveDistribution.for_devices(D).from_logits(inputs).")
        move_inputs, starts = split_segment_inputs(logits, int(d))
        grouped, moves = split_move_inputs(move_inputs, int(d))
        node_logits, assignment = unpack_dist_inputs(grouped, int(d))
        return cls(logits=node_logits, assignment=assignment, move_logits=moves, start_logits=starts)

    @staticmethod
    def required_input_dim(space: gym.Space, **kwargs) -> int:
        return GroupedMoveDistribution.required_input_dim(space) + int(space.nvec.size)

    def _start_logp(self) -> Tuple[Tensor, Tensor]:
        """``(log p(start i) [..., N], log p(no segment) [...])``; padded nodes never start."""
        masked = self.start_logits.masked_fill(~self._valid(), -float("inf"))
        none = torch.zeros_like(masked[..., :1])
        logp = torch.log_softmax(torch.cat([none, masked], -1), -1)
        return logp[..., 1:], logp[..., 0]

    def logp(self, value: Tensor, **kwargs) -> Tensor:
        """Exact ``log p(value)``: the mixture over the segments (module docstring)."""
        d = self.logits.shape[-1]
        if d == 1:
            return super().logp(value)
        node_term, glogp, rep = self.node_terms(value)
        base = self.marginal(node_term, glogp, rep)  # [...]
        start_logp, none_logp = self._start_logp()
        shape = node_term.shape[:-1]  # [..., N]
        n = shape[-1]
        a = value.long().clamp(0, d - 1).expand(shape)
        valid = self._valid().expand(shape)
        inside, starts = _segment_masks(n, a.device)  # [S, N], [S]
        seg = inside.view(-1, *([1] * (len(shape) - 1)), n) & valid  # [S, ..., N]
        big = d + 1
        hi = torch.where(seg, a, torch.full_like(a, -1)).amax(-1)
        lo = torch.where(seg, a, torch.full_like(a, big)).amin(-1)
        constant = hi == lo  # [S, ...]
        kept = node_term.masked_fill(seg.unsqueeze(-1), 0.0)  # [S, ..., N, D]
        rest = self.marginal(kept, glogp, rep)  # [S, ...]
        p_start = start_logp.expand(shape).movedim(-1, 0)[starts]  # [S, ...]
        seg_logp = p_start + rest - math.log(SEGMENT_MAX_LEN - 1) - math.log(d)
        seg_logp = seg_logp.masked_fill(~constant, -float("inf"))
        terms = torch.cat([(none_logp.expand(base.shape) + base).unsqueeze(0), seg_logp], 0)
        return torch.logsumexp(terms, 0)

    def entropy(self) -> Tensor:
        start_logp, none_logp = self._start_logp()
        p = start_logp.exp()
        starts = -(torch.where(p > 0, p * start_logp, torch.zeros_like(p))).sum(-1)
        return super().entropy() + starts - none_logp.exp() * none_logp

    def kl(self, other: "SegmentMoveDistribution") -> Tensor:
        sl, sn = self._start_logp()
        ol, on = other._start_logp()
        p = sl.exp()
        starts = torch.where(p > 0, p * (sl - ol), torch.zeros_like(p)).sum(-1)
        return super().kl(other) + starts + sn.exp() * (sn - on)

    def sample(self, *, sample_shape=None, **kwargs) -> Tensor:
        """Groups and moves (:class:`GroupedMoveDistribution`), then maybe a segment."""
        out = super().sample(sample_shape=sample_shape)
        shape = out.shape
        start_logp, none_logp = self._start_logp()
        logits = torch.cat([none_logp.unsqueeze(-1), start_logp], -1).expand(*shape[:-1], shape[-1] + 1)
        pick = torch.distributions.Categorical(logits=logits, validate_args=False).sample()
        start = pick - 1  # -1: no segment
        length = torch.randint(2, SEGMENT_MAX_LEN + 1, shape[:-1], device=out.device)
        device = torch.randint(0, self.logits.shape[-1], shape[:-1], device=out.device)
        nodes = torch.arange(shape[-1], device=out.device)
        inside = ((start >= 0).unsqueeze(-1) & (nodes >= start.unsqueeze(-1))
                  & (nodes < (start + length).unsqueeze(-1)) & self._valid().expand(shape))
        return torch.where(inside, device.unsqueeze(-1).expand(shape), out)


def __getattr__(name: str):
    # lets pickle find SegmentMoveDistribution.for_devices(D) by name in any process
    return bound_by_name(SegmentMoveDistribution, name)
