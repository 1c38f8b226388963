"""The action distribution of the RNN placer, for RLlib's new API stack.

A placement of the RNN placer (:mod:`policies.rnn.policy`) is a sequence of device
choices, one per op or per group, each conditioned on the ones before it. Given
the sequence that was decoded, the conditional logits of every step are fixed,
so the placement's log-probability is the sum over steps (groups) of each
step's categorical log-probability: exactly what
:class:`policies.distributions.GroupedPlacementDistribution` computes from
per-node logits and a grouping. With the learned grouper, the grouping itself
was sampled too: its log-probability and entropy ride along as two extra
columns and are added to the placer's. Layout (``N_max`` nodes, ``D``
devices)::

    [..., :N_max * (D + 1)]   GroupedPlacementDistribution's inputs
    [..., -2]                 log-probability of the grouping
    [..., -1]                 entropy of the grouper's softmaxes

``entropy`` is the sum over steps of each step's conditional entropy along the
decoded sequence (a one-sample estimate of the sequence entropy's terms), plus
the grouper's. ``kl`` compares the placer's steps only.
"""
from __future__ import annotations

from typing import ClassVar, Optional

import gymnasium as gym
from torch import Tensor
import torch

from policies.distributions import (GroupedPlacementDistribution, bind_devices, bound_by_name,
                                    pack_dist_inputs, unpack_dist_inputs)

__all__ = ["SequencePlacementDistribution", "pack_sequence_inputs"]


def pack_sequence_inputs(node_logits: Tensor, assignment: Tensor, group_logp: Tensor,
                         group_entropy: Tensor) -> Tensor:
    """``[..., N_max * (D + 1) + 2]`` inputs (see the module docstring)."""
    grouped = pack_dist_inputs(node_logits, assignment)
    return torch.cat([grouped, group_logp.unsqueeze(-1).to(grouped.dtype),
                      group_entropy.unsqueeze(-1).to(grouped.dtype)], -1)


class SequencePlacementDistribution(GroupedPlacementDistribution):
    """Grouped placement plus the grouping's own log-probability and entropy."""

    num_devices: ClassVar[Optional[int]] = None

    def __init__(self, logits: Tensor, assignment: Tensor, group_logp: Tensor,
                 group_entropy: Tensor) -> None:
        super().__init__(logits=logits, assignment=assignment)
        self.group_logp, self.group_entropy = group_logp, group_entropy

    @classmethod
    def for_devices(cls, num_devices: int) -> type["SequencePlacementDistribution"]:
        return bind_devices(SequencePlacementDistribution, int(num_devices))

    @classmethod
    def from_logits(cls, logits: Tensor, num_devices: Optional[int] = None,
                    **kwargs) -> "SequencePlacementDistribution":
        d = num_devices if num_devices is not None else cls.num_devices
        if d is None:
            raise ValueError("SequencePlacementDistribution needs the number of devices: use "
                             "SequencePlacementDistribution.for_devices(D)")
        node_logits, assignment = unpack_dist_inputs(logits[..., :-2], int(d))
        return cls(node_logits, assignment, logits[..., -2], logits[..., -1])

    @staticmethod
    def required_input_dim(space: gym.Space, **kwargs) -> int:
        return GroupedPlacementDistribution.required_input_dim(space) + 2

    def logp(self, value: Tensor, **kwargs) -> Tensor:
        return super().logp(value) + self.group_logp

    def entropy(self) -> Tensor:
        return super().entropy() + self.group_entropy


def __getattr__(name: str):
    # lets pickle find SequencePlacementDistribution.for_devices(D) by name in any process
    return bound_by_name(SequencePlacementDistribution, name)
