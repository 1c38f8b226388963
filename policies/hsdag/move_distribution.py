r"""Grouped placement with node moves: a group's device, then rare single-node moves.

HSDAG's grouped placement (:mod:`policies.distributions`) gives every node of
a group its group's device, and the Graph Parsing grouping never leaves a node
alone, so a placement whose optimum puts one node on the other device (e.g.
ResNet-50's last Add+FC on the CPU between accelerator nodes) cannot be
sampled. This distribution adds a second, per-node decision:

1. every group ``g`` draws a device :math:`c_g \sim \mathrm{softmax}(\ell_g)` (as before);
2. every node ``v`` of ``g`` *moves* with probability :math:`q_v = \sigma(m_v)`
   (a learned logit per node, initialised low so a placement moves about one
   node), and a moved node draws its device from its group's logits with
   :math:`c_g` left out.

Any placement can then be sampled, and the policy learns, per node, where
leaving the group pays (a move that led to a faster placement raises
:math:`q_v`), much as simulated annealing's single-node moves do, while the
groups keep the coarse structure.

``logp`` is the exact marginal over the unobserved group devices:

.. math::
    \log p(a) = \sum_g \log \sum_{c} p_g(c) \prod_{v \in g}
        \begin{cases} 1 - q_v & a_v = c \\ q_v \, p_v(a_v \mid \neg c) & a_v \neq c \end{cases}

so a stored action needs only the distribution inputs, not the sampled group
devices. ``entropy`` is the groups' entropy plus the moves' Bernoulli
entropies (an upper bound on the placement's; it is only a bonus), ``kl``
likewise the sum of the group and move KLs.

Input layout (``N_max * (D + 2)``): the grouped layout of
:mod:`policies.distributions` (``N_max * D`` logits, ``N_max`` group ids),
then ``N_max`` move logits.
"""
from __future__ import annotations

import functools
from typing import ClassVar, Optional, Tuple

import gymnasium as gym
import torch
import torch.nn.functional as F
from torch import Tensor

from policies.distributions import GroupedPlacementDistribution, bind_devices, bound_by_name, unpack_dist_inputs
from policies.hsdag.move_floor import floored_logits

__all__ = ["GroupedMoveDistribution", "pack_move_inputs", "split_move_inputs", "floored_logits"]


def pack_move_inputs(grouped_inputs: Tensor, move_logits: Tensor) -> Tensor:
    """``[..., N_max * (D + 2)]``: grouped inputs (``[..., N_max * (D + 1)]``) then move logits."""
    return torch.cat([grouped_inputs, move_logits.to(grouped_inputs.dtype)], dim=-1)


def split_move_inputs(inputs: Tensor, num_devices: int) -> Tuple[Tensor, Tensor]:
    """Inverse of :func:`pack_move_inputs`: ``(grouped inputs, move logits [..., N_max])``."""
    width = inputs.shape[-1]
    if width % (num_devices + 2) != 0:
        raise ValueError(f"Inputs of width {width} cannot hold N_max * ({num_devices} + 2) values "
                         "of a grouped placement with node moves; check the RLModule.")
    n = width // (num_devices + 2)
    return inputs[..., : n * (num_devices + 1)], inputs[..., n * (num_devices + 1):]


class GroupedMoveDistribution(GroupedPlacementDistribution):
    """A device per group, then each node moves off it with its own probability.

    Args:
        logits: ``[..., N_max, D]`` per-node logits (a group's read at its representative).
        assignment: ``[..., N_max]`` group ids, ``-1`` for padding.
        move_logits: ``[..., N_max]`` logit of each node's move probability.
    """

    num_devices: ClassVar[Optional[int]] = None

    def __init__(self, logits: Tensor, assignment: Tensor, move_logits: Tensor) -> None:
        super().__init__(logits=logits, assignment=assignment)
        self.move_logits = move_logits

    @functools.cached_property
    def group_logits_at_node(self) -> Tensor:
        """``[..., N_max, D]`` the group's logits at every node (padding: its own, never read)."""
        index = self._rep_index.unsqueeze(-1).expand_as(self.logits)
        return torch.gather(self.logits, -2, index)

    @classmethod
    def for_devices(cls, num_devices: int) -> type["GroupedMoveDistribution"]:
        return bind_devices(GroupedMoveDistribution, int(num_devices))

    @classmethod
    def from_logits(cls, logits: Tensor, num_devices: Optional[int] = None,
                    **kwargs) -> "GroupedMoveDistribution":
        d = num_devices if num_devices is not None else cls.num_devices
        if d is None:
            raise ValueError("GroupedMoveDistribution needs the number of devices: use "
                             "GroupedMoveDistribution.for_devices(D).from_logits(inputs).")
        grouped, moves = split_move_inputs(logits, int(d))
        node_logits, assignment = unpack_dist_inputs(grouped, int(d))
        return cls(logits=node_logits, assignment=assignment, move_logits=moves)

    @staticmethod
    def required_input_dim(space: gym.Space, **kwargs) -> int:
        n_times_d1 = GroupedPlacementDistribution.required_input_dim(space)
        return n_times_d1 + int(space.nvec.size)

    def _valid(self) -> Tensor:
        return self.assignment >= 0

    def logp(self, value: Tensor, **kwargs) -> Tensor:
        """Exact ``log p(value)``, marginal over the group devices (module docstring)."""
        d = self.logits.shape[-1]
        a = value.long().clamp(0, d - 1)
        if d == 1:
            shape = torch.broadcast_shapes(a.shape, self.assignment.shape)
            return torch.zeros(shape[:-1], dtype=self.logits.dtype, device=self.logits.device)
        if a.shape != self.assignment.shape:  # broadcast against a sample shape
            return self.marginal(*self.node_terms(a))
        # per valid node: its group's index k among the representatives (R of them), whose
        # logits and "every logit but c" log-sum-exps are computed once per group
        flat_rep, _ = self._reps
        n = a.shape[-1]
        valid = self._valid().reshape(-1).nonzero().squeeze(1)
        rows = torch.div(valid, n, rounding_mode="floor")
        rank = torch.full((self.assignment.numel(),), -1, dtype=torch.long, device=a.device)
        rank[flat_rep] = torch.arange(flat_rep.numel(), device=a.device)
        k = rank[rows * n + self._rep_index.reshape(-1)[valid]]
        logits = self._rep_logits  # [R, D]
        without_c = torch.eye(d, dtype=torch.bool, device=logits.device)
        lse_without = torch.logsumexp(logits.unsqueeze(-2).masked_fill(without_c, -float("inf")), -1)
        av = a.reshape(-1)[valid].unsqueeze(-1)  # [V, 1]
        other = logits.index_select(0, k).gather(-1, av) - lse_without.index_select(0, k)  # [V, D]
        moves = self.move_logits.expand(self.assignment.shape).reshape(-1)[valid].unsqueeze(-1)
        stays = av == torch.arange(d, device=a.device)
        node_term = torch.where(stays, F.logsigmoid(-moves), F.logsigmoid(moves) + other)
        summed = torch.zeros_like(logits).index_add_(0, k, node_term)  # each group's node terms
        group_logp = torch.logsumexp(torch.log_softmax(logits, -1) + summed, -1)  # [R]
        return self._sum_at_reps(group_logp)

    def node_terms(self, value: Tensor) -> Tuple[Tensor, Tensor, Tensor]:
        """Per node and group device ``c``: ``log`` of the node's factor in the
        module docstring's product (``0`` for padding), ``[..., N, D]``; the
        groups' device log-probabilities at every node, ``[..., N, D]``; and each
        node's representative, ``[..., N]`` (all broadcast to ``value``'s batch).
        :meth:`marginal` of them is :meth:`logp`, computed at every node rather
        than once per group (for actions broadcast against the distribution, and
        for the segment mixture, which leaves nodes out of the product)."""
        d = self.logits.shape[-1]
        a = value.long().clamp(0, d - 1)
        shape = torch.broadcast_shapes(a.shape, self.assignment.shape)
        a = a.expand(shape)
        valid = self._valid().expand(shape)
        rep = self._rep_index.expand(shape)
        move_logits = self.move_logits.expand(shape)
        logits = self.group_logits_at_node.expand(*shape, d)
        log_stay = F.logsigmoid(-move_logits).unsqueeze(-1)
        log_move = F.logsigmoid(move_logits).unsqueeze(-1)
        glogp = torch.log_softmax(logits, -1)  # [..., N, D]
        # every group device c at once (the last axis is c): log p_v(a | not c) is a's
        # logit minus the log-sum-exp of the logits without c
        without_c = torch.eye(d, dtype=torch.bool, device=logits.device)
        lse_without = torch.logsumexp(logits.unsqueeze(-2).masked_fill(without_c, -float("inf")), -1)
        other = logits.gather(-1, a.unsqueeze(-1)) - lse_without  # finite, also where a == c
        stays = a.unsqueeze(-1) == torch.arange(d, device=a.device)
        node_term = torch.where(stays, log_stay, log_move + other)
        node_term = node_term.masked_fill(~valid.unsqueeze(-1), 0.0)
        return node_term, glogp, rep

    def marginal(self, node_term: Tensor, glogp: Tensor, rep: Tensor) -> Tensor:
        """``sum_g log sum_c p_g(c) prod_{v in g} exp(node_term[v, c])``, ``[...]``;
        extra leading axes of ``node_term`` (e.g. one per candidate segment) broadcast."""
        shape = node_term.shape
        index = rep.unsqueeze(-1).expand(shape)
        # sum the node terms of every group at its representative
        summed = torch.zeros_like(node_term).scatter_add_(-2, index, node_term)
        group_logp = torch.logsumexp(glogp.expand(shape) + summed, -1)  # meaningful at representatives
        is_rep = self._is_rep.expand(shape[:-1])
        return torch.where(is_rep, group_logp, torch.zeros_like(group_logp)).sum(-1)

    def entropy(self) -> Tensor:
        bern = F.binary_cross_entropy_with_logits(
            self.move_logits, torch.sigmoid(self.move_logits), reduction="none")
        bern = torch.where(self._valid(), bern, torch.zeros_like(bern)).sum(-1)
        return super().entropy() + bern

    def kl(self, other: "GroupedMoveDistribution") -> Tensor:
        p, q = torch.sigmoid(self.move_logits), other.move_logits
        bern = (p * (F.logsigmoid(self.move_logits) - F.logsigmoid(q))
                + (1 - p) * (F.logsigmoid(-self.move_logits) - F.logsigmoid(-q)))
        bern = torch.where(self._valid(), bern, torch.zeros_like(bern)).sum(-1)
        return super().kl(other) + bern

    def sample(self, *, sample_shape=None, **kwargs) -> Tensor:
        """A device per group, then the moves; padded nodes get ``0``."""
        group = super().sample(sample_shape=sample_shape)
        shape = group.shape
        moves = torch.rand(shape, device=group.device) < torch.sigmoid(self.move_logits).expand(shape)
        masked = self.group_logits_at_node.expand(*shape, self.logits.shape[-1]).clone()
        masked.scatter_(-1, group.unsqueeze(-1), -float("inf"))
        if masked.shape[-1] > 1:
            moved = torch.distributions.Categorical(logits=masked, validate_args=False).sample()
        else:
            moved = group
        out = torch.where(moves & self._valid().expand(shape), moved, group)
        return out

    def to_deterministic(self):
        """Each group's most likely device; a node whose move is more likely
        than not takes its best other device."""
        from policies.distributions import GroupedPlacementDeterministic

        group = self._broadcast_from_reps(self.logits.argmax(-1))
        masked = self.group_logits_at_node.clone()
        masked.scatter_(-1, group.unsqueeze(-1), -float("inf"))
        moved = masked.argmax(-1) if masked.shape[-1] > 1 else group
        loc = torch.where((self.move_logits > 0) & self._valid(), moved, group)
        return GroupedPlacementDeterministic(loc=loc)


def __getattr__(name: str):
    # lets pickle find GroupedMoveDistribution.for_devices(D) by name in any process
    return bound_by_name(GroupedMoveDistribution, name)
