"""Grouped placement as plain torch: one device per group, broadcast to its nodes.

HSDAG (Duan et al., "A Structure-Aware Framework for Learning Device Placements
on Computation Graphs", NeurIPS 2024) places *groups* of operations: the policy
outputs one categorical over the ``D`` devices per group, one device is drawn per
group and every node of the group gets it. :class:`GroupedPlacement` is that
distribution (``logp``, ``entropy``, ``kl``, ``sample``, ``greedy``) with torch
alone, so a process without Ray trains HSDAG with it
(:mod:`policies.hsdag.local`); the RLlib action distribution
:class:`policies.distributions.GroupedPlacementDistribution` is this class plus
RLlib's ``TorchDistribution`` interface, and reads the flat inputs built by
:func:`pack_dist_inputs` (layout in :mod:`policies.distributions`).

Rules (the same for both):

* The *representative* of a group is its first (lowest-index) node; every
  quantity of a group (its logits, its action in ``logp``) is read there.
* ``logp``, ``entropy`` and ``kl`` are sums over groups of the per-group
  categorical quantity (the group decisions are independent given the logits).
* Padded nodes (group id :data:`PADDED_GROUP`) take the dummy action ``0`` and
  add nothing to ``logp``, ``entropy`` or ``kl``.
"""
from __future__ import annotations

import functools
from typing import Tuple

import numpy as np
import torch
from torch import Tensor

__all__ = ["PADDED_GROUP", "GroupedPlacement", "pack_dist_inputs", "unpack_dist_inputs",
           "representatives"]

PADDED_GROUP = -1


def pack_dist_inputs(node_logits: Tensor, assignment: Tensor) -> Tensor:
    """Builds the flat distribution inputs from per-node logits and groups.

    Args:
        node_logits: ``[..., N_max, D]`` logits of each node's group.
        assignment: ``[..., N_max]`` group id per node (``-1`` for padding).

    Returns:
        ``[..., N_max * (D + 1)]``: the logits (node-major), then the group ids.
    """
    if node_logits.shape[:-1] != assignment.shape:
        raise ValueError(
            f"node_logits {tuple(node_logits.shape)} and assignment "
            f"{tuple(assignment.shape)} must agree on all but the last dimension."
        )
    flat = node_logits.reshape(*node_logits.shape[:-2], -1)
    return torch.cat([flat, assignment.to(node_logits.dtype)], dim=-1)


def unpack_dist_inputs(inputs: Tensor, num_devices: int) -> Tuple[Tensor, Tensor]:
    """Inverse of :func:`pack_dist_inputs`.

    Returns:
        ``(node_logits [..., N_max, D], assignment [..., N_max] long)``.
    """
    width = inputs.shape[-1]
    if num_devices < 1 or width % (num_devices + 1) != 0:
        raise ValueError(
            f"Grouped placement inputs of width {width} cannot hold N_max * "
            f"({num_devices} + 1) values; the width must be N_max * (D + 1) with "
            f"D = {num_devices} devices. Check the RLModule's action space."
        )
    n = width // (num_devices + 1)
    node_logits = inputs[..., : n * num_devices].reshape(*inputs.shape[:-1], n, num_devices)
    assignment = torch.round(inputs[..., n * num_devices :]).long()
    return node_logits, assignment


def representatives(assignment: Tensor) -> Tuple[Tensor, Tensor]:
    """Finds each group's representative (its lowest-index node).

    Args:
        assignment: ``[..., N]`` group ids, ``-1`` (any negative value) for
            padded nodes. Ids need not be contiguous, but must be ``< N``.

    Returns:
        ``(rep_index [..., N] long, is_rep [..., N] bool)``: for every node the
        index of its group's representative (a padded node points to itself),
        and whether the node is a representative (never true for padding).
    """
    n = assignment.shape[-1]
    flat = assignment.reshape(-1, n)
    rows = flat.shape[0]
    padded = flat < 0
    if bool((flat >= n).any()):
        raise ValueError(f"Group ids must be smaller than the number of nodes ({n}).")
    # Padded nodes go to an extra slot n that is never read back.
    slot = torch.where(padded, torch.full_like(flat, n), flat)
    node_ids = torch.arange(n, device=flat.device).expand(rows, n)
    first = torch.full((rows, n + 1), n, dtype=torch.long, device=flat.device)
    first.scatter_reduce_(1, slot, node_ids, reduce="amin", include_self=True)
    rep = torch.gather(first, 1, slot)
    rep = torch.where(padded, node_ids, rep)
    is_rep = (rep == node_ids) & ~padded
    return rep.reshape(assignment.shape), is_rep.reshape(assignment.shape)



class GroupedPlacement:
    """One categorical device choice per group, broadcast to the group's nodes.

    Args:
        logits: ``[..., N_max, D]`` per-node logits (a group's logits are read
            at its representative node).
        assignment: ``[..., N_max]`` long group ids, ``-1`` for padded nodes.

    See the module docstring for the conventions.
    """

    def __init__(self, logits: Tensor, assignment: Tensor) -> None:
        if logits.shape[:-1] != assignment.shape:
            raise ValueError(
                f"logits {tuple(logits.shape)} must be [..., N_max, D] and assignment "
                f"{tuple(assignment.shape)} must be [..., N_max]."
            )
        self.logits = logits
        self.assignment = assignment.long()
        self._rep_index, self._is_rep = representatives(self.assignment)

    def _get_torch_distribution(self, logits: Tensor) -> torch.distributions.Distribution:
        # One categorical per node; only the representatives' ones are used.
        return torch.distributions.Categorical(logits=logits, validate_args=False)

    @functools.cached_property
    def _dist(self) -> torch.distributions.Categorical:
        return self._get_torch_distribution(self.logits)

    @functools.cached_property
    def _reps(self) -> Tuple[Tensor, Tensor]:
        """``(flat [R], row [R])``: each representative's index into the flattened
        ``[rows * N_max]`` nodes and its row (the flattened leading dimensions)."""
        flat = self._is_rep.reshape(-1).nonzero().squeeze(1)
        return flat, torch.div(flat, self.assignment.shape[-1], rounding_mode="floor")

    @functools.cached_property
    def _rep_logits(self) -> Tensor:
        """``[R, D]`` the logits of every group (at its representative)."""
        return self.logits.reshape(-1, self.logits.shape[-1]).index_select(0, self._reps[0])

    @functools.cached_property
    def _group_dist(self) -> torch.distributions.Categorical:
        """The groups' categoricals (one per representative, ``R`` of them): a graph
        of ``N`` nodes has far fewer groups, and only theirs are ever read."""
        return torch.distributions.Categorical(logits=self._rep_logits, validate_args=False)

    def _sum_at_reps(self, values: Tensor) -> Tensor:
        """``[...]``: per-group ``values`` (``[R]``, in representative order) summed per row."""
        batch_shape = self.assignment.shape[:-1]
        out = values.new_zeros(int(np.prod(batch_shape, dtype=np.int64)))
        return out.index_add_(0, self._reps[1], values).reshape(batch_shape)

    # -- group views -----------------------------------------------------------------
    @property
    def num_groups(self) -> Tensor:
        """``[...]`` number of groups per graph."""
        return self._is_rep.sum(-1)

    def _broadcast_from_reps(self, node_values: Tensor) -> Tensor:
        """Copies each representative's value to the nodes of its group."""
        index = self._rep_index.expand_as(node_values)
        out = torch.gather(node_values, -1, index)
        return torch.where(self.assignment.expand_as(out) < 0, torch.zeros_like(out), out)

    def _sum_over_groups(self, node_values: Tensor) -> Tensor:
        return torch.where(self._is_rep, node_values, torch.zeros_like(node_values)).sum(-1)

    # -- distribution ----------------------------------------------------------------
    def logp(self, value: Tensor, **kwargs) -> Tensor:
        """Sum over groups of ``log p_g(value[rep(g)])``; shape ``[...]``."""
        d = self.logits.shape[-1]
        value = value.long().clamp(0, d - 1)  # padded entries are ignored anyway
        if value.shape != self.assignment.shape:  # broadcast against a sample shape
            return self._sum_over_groups(self._dist.log_prob(value))
        return self._sum_at_reps(self._group_dist.log_prob(value.reshape(-1)[self._reps[0]]))

    def entropy(self) -> Tensor:
        """Sum over groups of the group categorical's entropy; shape ``[...]``."""
        return self._sum_at_reps(self._group_dist.entropy())

    def kl(self, other: "GroupedPlacement") -> Tensor:
        """Sum over this distribution's groups of ``KL(p_g || q_g)``."""
        if not isinstance(other, GroupedPlacement):
            raise TypeError(f"kl() needs another {type(self).__name__}, got {type(other)}.")
        if other.logits.shape != self.logits.shape:
            per_node = torch.distributions.kl_divergence(self._dist, other._dist)
            return self._sum_over_groups(per_node)
        theirs = torch.distributions.Categorical(
            logits=other.logits.reshape(-1, other.logits.shape[-1]).index_select(0, self._reps[0]),
            validate_args=False)
        return self._sum_at_reps(torch.distributions.kl_divergence(self._group_dist, theirs))

    def sample(self, *, sample_shape=None, **kwargs) -> Tensor:
        """One device per group, copied to its nodes; padded nodes get ``0``.

        Returns:
            ``[*sample_shape, ..., N_max]`` long.
        """
        shape = torch.Size(sample_shape) if sample_shape is not None else torch.Size()
        per_node = self._dist.sample(shape)
        return self._broadcast_from_reps(per_node)

    def greedy(self) -> Tensor:
        """``[..., N_max]``: the most likely device of every group, copied to its nodes."""
        return self._broadcast_from_reps(self.logits.argmax(-1))
