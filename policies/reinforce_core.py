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
  the replay memory;
* :class:`LocalLearner` is an in-process loop's iteration and update around them.

The advantages ``A_t`` are the method's (:func:`policies.advantages.advantages` by
default, the RNN placer's moving-average baseline, Placeto's per-step baseline), computed
by the caller. Nothing here imports Ray.
"""
from __future__ import annotations

from typing import Any, Callable, Iterable, Optional, Sequence

import numpy as np
import torch
from torch import Tensor

from policies.reinforce_state import StallCount, due_to_soften, remember

__all__ = ["ReinforceCore", "LocalLearner", "reinforce_loss"]


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


class LocalLearner:
    """What the in-process loops share: an iteration (episodes sampled and rewarded
    placement by placement, then one update) and the update through :class:`ReinforceCore`.

    A subclass sets ``learn`` (the settings), ``core``, ``optimizer`` and ``updates`` (0),
    and gives :meth:`sample_episode`, :meth:`score`, :meth:`advantages` and :meth:`soften`.
    """

    learn: Any
    core: ReinforceCore
    optimizer: Optional[torch.optim.Optimizer]
    updates: int

    def sample_episode(self, x: Any) -> Any:
        """An episode sampled for the observation ``x``: anything with ``actions``
        (``[T, N]``, a device per node and step)."""
        raise NotImplementedError

    def score(self, episodes: Sequence[Any]) -> tuple[Tensor, Tensor, dict[str, float]]:
        """``(logp [B, T], entropy [B, T], metrics)`` of the episodes' placements under the
        current weights, with gradients."""
        raise NotImplementedError

    def advantages(self, rewards: Tensor, mask: Tensor) -> Tensor:
        """``A`` of the batch's rewards ``[B, T]`` (0 where ``mask`` is 0)."""
        raise NotImplementedError

    def soften(self, shrink: float) -> None:
        """Spreads the policy's distribution (a stalled run's response)."""

    def update(self, episodes: Sequence[Any], rewards: Sequence[Sequence[float]]) -> dict[str, float]:
        """One REINFORCE update on ``episodes`` (their ``rewards``, one per step) and the
        replay memory's; returns the last pass's ``policy_loss``, ``entropy``, the
        metrics of :meth:`score` and ``entropy_weight``."""
        if len(episodes) != len(rewards) or not episodes:
            raise ValueError("update needs one list of rewards per episode, and an episode")
        batch = list(zip(episodes, rewards)) + self.core.replayed()
        r = torch.tensor([[float(v) for v in rw] for _, rw in batch], dtype=torch.float32)
        if r.shape[1] != batch[0][0].actions.size(0):
            raise ValueError(f"every episode needs one reward per placement ({r.shape[1]} given "
                             f"for {batch[0][0].actions.size(0)})")
        mask = torch.ones_like(r)
        weight = self.core.begin_update(self.soften)
        adv = self.advantages(r, mask)
        for _ in range(self.learn.num_epochs):
            logp, entropy, metrics = self.score([ep for ep, _ in batch])
            loss, pg_loss, mean_entropy = self.core.loss(logp, entropy, r, mask, adv, weight)
            self.core.step(self.optimizer, loss)
        self.updates += 1
        self.core.remember((max(rw), (ep, list(rw))) for ep, rw in zip(episodes, rewards))
        return {"policy_loss": pg_loss.item(), "entropy": mean_entropy.item(), **metrics,
                "entropy_weight": weight}

    def iterate(self, observe: Callable[[], Any],
                reward: Callable[[np.ndarray], Optional[float]]) -> Optional[dict[str, float]]:
        """One training iteration: ``episodes_per_iteration`` episodes, each sampled for the
        observation ``observe()`` gives and rewarded placement by placement (``reward(p)``
        for ``p`` a device index per node), then :meth:`update`. Returns the update's
        metrics, or None without an update once ``reward`` returns None (the run's budget
        is spent)."""
        episodes, rewards = [], []
        for _ in range(self.learn.episodes_per_iteration):
            episode = self.sample_episode(observe())
            values = []
            for placement in episode.actions.numpy():
                value = reward(placement)
                if value is None:
                    return None
                values.append(float(value))
            episodes.append(episode)
            rewards.append(values)
        return self.update(episodes, rewards)
