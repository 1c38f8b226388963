"""The action distribution of grouped placement, for RLlib's new API stack.

HSDAG (Duan et al., "A Structure-Aware Framework for Learning Device Placements
on Computation Graphs", NeurIPS 2024) places *groups* of operations: the policy
outputs one categorical over the ``D`` devices per group, one device is drawn per
group and every node of the group gets it. The action the environment sees is
still one device per node (``MultiDiscrete([D] * N_max)``, padded), so the
distribution must know which node belongs to which group. The grouping is
learned and changes from step to step, hence it travels *inside* the
distribution inputs:

.. code-block:: text

    action_dist_inputs[..., :N_max * D]          per-node logits, node-major:
                                                 node i's D logits at [i*D:(i+1)*D]
                                                 (every node of a group carries its
                                                 group's logits)
    action_dist_inputs[..., N_max * D:]          per-node group id (float), groups
                                                 numbered 0..G-1 per graph by their
                                                 first node; -1 marks a padded node

so ``required_input_dim = N_max * (D + 1)``. What RLlib stores with a sample
(``Columns.ACTION_DIST_INPUTS``) is therefore enough for the learner to rebuild
the distribution under the grouping that produced the sample:
``from_logits(stored).logp(action)`` equals the sampler's ``logp``.

Rules:

* The *representative* of a group is its first (lowest-index) node. Every
  quantity of a group (its logits, its action in ``logp``) is read at the
  representative. For distribution inputs built by :mod:`policies.hsdag.policy` all
  nodes of a group carry the same logits, so this is only a convention; for an
  action that is not constant within a group (e.g. one not sampled from this
  distribution), ``logp`` scores the representative's device, i.e. the action is
  read as "group g goes to action[rep(g)]".
* ``logp``, ``entropy`` and ``kl`` are sums over groups of the per-group
  categorical quantity (the sampled group decisions are independent given the
  inputs). ``kl(other)`` is evaluated under *this* distribution's grouping,
  which is exact when both share the grouping (as RLlib's PPO does with
  :class:`policies.hsdag.module.HSDAGRLModule`, which re-uses the sampled grouping in
  ``forward_train``).
* Padded nodes (group id ``-1``) take the fixed dummy action ``0`` and add
  nothing to ``logp``, ``entropy`` or ``kl``.

RLlib builds action distributions with ``cls.from_logits(inputs)`` and nothing
else, so the number of devices is bound to a class:
``GroupedPlacementDistribution.for_devices(D)`` returns a (cached, picklable)
subclass whose ``from_logits`` needs only the inputs.
"""
from __future__ import annotations

import functools
from typing import ClassVar, Optional, Tuple

import gymnasium as gym
import numpy as np
import torch
from ray.rllib.core.distribution.torch.torch_distribution import (
    TorchDeterministic,
    TorchDistribution,
)
from torch import Tensor

__all__ = [
    "GroupedPlacementDistribution",
    "GroupedPlacementDeterministic",
    "pack_dist_inputs",
    "unpack_dist_inputs",
    "representatives",
]

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


class GroupedPlacementDistribution(TorchDistribution):
    """One categorical device choice per group, broadcast to the group's nodes.

    Args:
        logits: ``[..., N_max, D]`` per-node logits (a group's logits are read
            at its representative node).
        assignment: ``[..., N_max]`` long group ids, ``-1`` for padded nodes.

    See the module docstring for the input layout and the conventions.
    """

    #: Number of devices bound by :meth:`for_devices`; ``None`` on the base class.
    num_devices: ClassVar[Optional[int]] = None

    def __init__(self, logits: Tensor, assignment: Tensor) -> None:
        if logits.shape[:-1] != assignment.shape:
            raise ValueError(
                f"logits {tuple(logits.shape)} must be [..., N_max, D] and assignment "
                f"{tuple(assignment.shape)} must be [..., N_max]."
            )
        self.logits = logits
        self.assignment = assignment.long()
        self._rep_index, self._is_rep = representatives(self.assignment)
        # not TorchDistribution.__init__: its per-node categorical (``_dist``) is built
        # only when sampling needs it; logp, entropy and kl read the representatives only
        super(TorchDistribution, self).__init__()

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

    # -- construction ----------------------------------------------------------------
    @classmethod
    def for_devices(cls, num_devices: int) -> type["GroupedPlacementDistribution"]:
        """The subclass whose :meth:`from_logits` reads inputs for ``num_devices``.

        Set it as ``self.action_dist_cls`` in an RLModule's ``setup()``. The
        class is cached (one per ``D``) and picklable by reference.
        """
        return bind_devices(GroupedPlacementDistribution, int(num_devices))

    @classmethod
    def from_logits(
        cls, logits: Tensor, num_devices: Optional[int] = None, **kwargs
    ) -> "GroupedPlacementDistribution":
        """Rebuilds the distribution from flat inputs (see the module docstring).

        Args:
            logits: ``[..., N_max * (D + 1)]`` packed inputs.
            num_devices: ``D``; defaults to the class's bound ``num_devices``.
        """
        d = num_devices if num_devices is not None else cls.num_devices
        if d is None:
            raise ValueError(
                "GroupedPlacementDistribution needs the number of devices: use "
                "GroupedPlacementDistribution.for_devices(D).from_logits(inputs) or "
                "pass num_devices=D."
            )
        node_logits, assignment = unpack_dist_inputs(logits, int(d))
        return cls(logits=node_logits, assignment=assignment)

    @staticmethod
    def required_input_dim(space: gym.Space, **kwargs) -> int:
        """``N_max * (D + 1)`` for ``MultiDiscrete([D] * N_max)``."""
        if not isinstance(space, gym.spaces.MultiDiscrete) or space.nvec.ndim != 1:
            raise ValueError(
                f"Grouped placement needs a flat MultiDiscrete([D] * N_max) action "
                f"space, got {space}."
            )
        nvec = np.asarray(space.nvec)
        if not np.all(nvec == nvec[0]):
            raise ValueError(
                f"Every node must choose among the same D devices; got nvec={nvec.tolist()}."
            )
        return int(nvec.size * (int(nvec[0]) + 1))

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

    # -- Distribution API ------------------------------------------------------------
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

    def kl(self, other: "GroupedPlacementDistribution") -> Tensor:
        """Sum over this distribution's groups of ``KL(p_g || q_g)``."""
        if not isinstance(other, GroupedPlacementDistribution):
            raise TypeError(f"kl() needs another GroupedPlacementDistribution, got {type(other)}.")
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

    def rsample(self, *, sample_shape=None, **kwargs) -> Tensor:
        raise NotImplementedError(
            "Grouped placement is discrete and has no reparameterized sample; "
            "use sample() with logp() (REINFORCE / PPO), not rsample()."
        )

    def to_deterministic(self) -> "GroupedPlacementDeterministic":
        """The most likely device of every group, copied to its nodes."""
        return GroupedPlacementDeterministic(loc=self._broadcast_from_reps(self.logits.argmax(-1)))


class GroupedPlacementDeterministic(TorchDeterministic):
    """Greedy grouped placement; ``logp`` is ``0`` per placement (shape ``[...]``).

    RLlib's :class:`TorchDeterministic` returns a ``logp`` shaped like the
    action (one zero per node); a placement is one action, so this returns one
    zero per placement, like the stochastic distribution does.
    """

    def logp(self, value: Tensor, **kwargs) -> Tensor:
        return torch.zeros(self.loc.shape[:-1], dtype=torch.float32, device=self.loc.device)


@functools.lru_cache(maxsize=None)
def bind_devices(base: type, num_devices: int) -> type:
    """``base`` with ``num_devices`` fixed: a subclass named ``<base>_D<num_devices>``
    in ``base``'s module, cached, so it pickles by reference (the module's
    ``__getattr__`` rebuilds it by name with :func:`bound_by_name`)."""
    if num_devices < 1:
        raise ValueError(f"num_devices must be >= 1, got {num_devices}.")
    name = f"{base.__name__}_D{num_devices}"
    attrs = {"num_devices": num_devices, "__module__": base.__module__, "__qualname__": name}
    return type(name, (base,), attrs)


def bound_by_name(base: type, name: str) -> type:
    """The class :func:`bind_devices` names ``name``; a module's ``__getattr__`` calls it
    so pickle finds the class in any process (e.g. a Ray worker that has not built it)."""
    prefix = f"{base.__name__}_D"
    if name.startswith(prefix) and name[len(prefix):].isdigit():
        return bind_devices(base, int(name[len(prefix):]))
    raise AttributeError(f"module {base.__module__!r} has no attribute {name!r}")


def __getattr__(name: str):
    return bound_by_name(GroupedPlacementDistribution, name)
