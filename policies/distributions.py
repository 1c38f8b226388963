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
from typing import ClassVar, Optional

import gymnasium as gym
import numpy as np
import torch
from ray.rllib.core.distribution.torch.torch_distribution import (
    TorchDeterministic,
    TorchDistribution,
)
from torch import Tensor

from policies.grouped_placement import (
    PADDED_GROUP,
    GroupedPlacement,
    pack_dist_inputs,
    representatives,
    unpack_dist_inputs,
)

__all__ = [
    "PADDED_GROUP",
    "GroupedPlacementDistribution",
    "GroupedPlacementDeterministic",
    "pack_dist_inputs",
    "unpack_dist_inputs",
    "representatives",
]

class GroupedPlacementDistribution(GroupedPlacement, TorchDistribution):
    """One categorical device choice per group, broadcast to the group's nodes, as an
    RLlib ``TorchDistribution``.

    Args:
        logits: ``[..., N_max, D]`` per-node logits (a group's logits are read
            at its representative node).
        assignment: ``[..., N_max]`` long group ids, ``-1`` for padded nodes.

    ``logp``, ``entropy``, ``kl``, ``sample`` and ``greedy`` are
    :class:`policies.grouped_placement.GroupedPlacement`'s (plain torch); this class
    adds how RLlib builds it (:meth:`for_devices`, :meth:`from_logits`). See the
    module docstring for the input layout and the conventions.
    """

    #: Number of devices bound by :meth:`for_devices`; ``None`` on the base class.
    num_devices: ClassVar[Optional[int]] = None

    def __init__(self, logits: Tensor, assignment: Tensor) -> None:
        GroupedPlacement.__init__(self, logits, assignment)
        # not TorchDistribution.__init__: its per-node categorical (``_dist``) is built
        # only when sampling needs it; logp, entropy and kl read the representatives only
        super(TorchDistribution, self).__init__()

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

    # -- Distribution API ------------------------------------------------------------
    def rsample(self, *, sample_shape=None, **kwargs) -> Tensor:
        raise NotImplementedError(
            "Grouped placement is discrete and has no reparameterized sample; "
            "use sample() with logp() (REINFORCE / PPO), not rsample()."
        )

    def to_deterministic(self) -> "GroupedPlacementDeterministic":
        """The most likely device of every group, copied to its nodes."""
        return GroupedPlacementDeterministic(loc=self.greedy())


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
