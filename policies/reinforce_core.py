"""REINFORCE's update, the one core every loop that trains by REINFORCE calls.

The RLlib learner (:class:`policies.reinforce.REINFORCETorchLearner`) and the in-process
loops (:class:`policies.hsdag.local.LocalHSDAG`, :class:`policies.local_module.LocalModule`)
score a batch of sampled placements (``logp`` and entropy per placement, with gradients)
and hand them here with the rewards:

* :meth:`ReinforceCore.begin_update` counts the previous update as stalled or not, spreads
  a stalled policy (``stall_shrink``) and gives this update's entropy weight
  (:class:`policies.reinforce_state.StallCount`);
* :func:`reinforce_loss` is the loss
  ``-mean_t[logp_t * A_t] - w * mean_t[H_t]`` over the batch's real steps;
* :meth:`ReinforceCore.step` minimises it with the loop's optimiser (the RLlib learner's
  is RLlib's own), :meth:`ReinforceCore.replayed` and :meth:`ReinforceCore.remember` keep
  the replay memory.

The advantages ``A_t`` are the method's (:func:`policies.advantages.advantages` by
default, the RNN placer's moving-average baseline, Placeto's per-step baseline), computed
by the caller. Nothing here imports Ray.
"""
from __future__ import annotations

from typing import Any, Callable, Iterable, Optional

import torch
from torch import Tensor

from policies.reinforce_state import StallCount, due_to_soften, remember

__all__ = ["ReinforceCore", "reinforce_loss"]


def reinforce_loss(logp: Tensor, entropy: Tensor, adv: Tensor, mask: Tensor,
                   weight: float) -> tuple[Tensor, Tensor, Tensor]:
    """``(loss, policy_loss, mean_entropy)`` of a batch: ``logp``, ``entropy``, ``adv`` and
    ``mask`` of one shape (a step per entry, ``mask`` 1 for real steps and 0 for padding),
    ``weight`` the entropy bonus weight."""
    count = mask.sum().clamp_min(1.0)
    pg_loss = -(logp * adv * mask).sum() / count
    mean_entropy = (entropy * mask).sum() / count
    return pg_loss - weight * mean_entropy, pg_loss, mean_entropy


class ReinforceCore(StallCount):
    """The state REINFORCE keeps between updates (the stall count, the replay memory) and
    the steps of one update (module docstring).

    Args:
        config: the settings, anything with :class:`policies.reinforce_config.ReinforceConfig`'s
            fields as attributes (``entropy_coeff``, ``stall_*``, ``replay*``).
    """

    def __init__(self, config: Any) -> None:
        self.config = config
        self._memory: list = []
        self._remembered = 0

    def begin_update(self, soften: Optional[Callable[[float], None]] = None) -> float:
        """Counts the previous update as stalled or a new best, calls ``soften(stall_shrink)``
        when the run has stalled long enough (then counts afresh), and returns this
        update's entropy weight."""
        self.count_stall()
        if due_to_soften(self._stalled_updates, self.config):
            if soften is not None:
                soften(float(self.config.stall_shrink))
            self._stalled_updates = 0
        return self.entropy_weight(self.config)

    def loss(self, logp: Tensor, entropy: Tensor, rewards: Tensor, mask: Tensor, adv: Tensor,
             weight: float) -> tuple[Tensor, Tensor, Tensor]:
        """:func:`reinforce_loss`, noting the batch's best reward for the stall count."""
        if bool((mask > 0.5).any()):
            self._batch_best = max(self._batch_best, float(rewards[mask > 0.5].max()))
        return reinforce_loss(logp, entropy, adv, mask, weight)

    @staticmethod
    def step(optimizer: torch.optim.Optimizer, loss: Tensor) -> None:
        """One optimiser step on ``loss``."""
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    def replayed(self) -> list:
        """The remembered items an update trains on besides its new ones."""
        return [item for _, _, item in self._memory]

    def remember(self, scored: Iterable[tuple[float, Any]]) -> None:
        """Adds ``(best reward, item)`` pairs to the replay memory, keeping
        ``replay_episodes`` of them (``replay``: the best or the newest)."""
        keep = int(getattr(self.config, "replay_episodes", 0))
        if keep > 0:
            self._memory, self._remembered = remember(self._memory, scored, keep,
                                                      self.config.replay, self._remembered)
