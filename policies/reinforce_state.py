"""What REINFORCE keeps between updates, in plain Python: the stall count and the replay
memory (described in :mod:`policies.reinforce`).

:class:`policies.reinforce_core.ReinforceCore` keeps them for the RLlib learner and
algorithm (:mod:`policies.reinforce`) and the in-process loops alike, so every loop
responds to a stalled run and replays earlier episodes the same way. ``config`` is anything with the settings as attributes
(``entropy_coeff``, ``stall_patience``, ``stall_entropy``, ``stall_shrink``).
"""
from __future__ import annotations

from typing import Any, Iterable

__all__ = ["StallCount", "due_to_soften", "remember"]


class StallCount:
    """Counts the updates since a batch last held a better reward than every earlier batch
    (the run's best placement); from ``stall_patience`` such updates on, the entropy
    weight is ``stall_entropy`` instead of ``entropy_coeff``. The owner sets
    ``_batch_best`` to the best reward of each update's batch."""

    _best_reward = -float("inf")
    _stalled_updates = 0
    _batch_best = -float("inf")

    def count_stall(self) -> None:
        """Counts the previous update (its batch's best reward, over all its epochs)
        as stalled or as the run's new best."""
        if self._batch_best > self._best_reward:
            self._best_reward, self._stalled_updates = self._batch_best, 0
        elif self._batch_best > -float("inf"):
            self._stalled_updates += 1
        self._batch_best = -float("inf")

    def entropy_weight(self, config: Any) -> float:
        """The entropy bonus weight of this update (``stall_entropy`` once stalled)."""
        patience = getattr(config, "stall_patience", 0)
        if patience > 0 and self._stalled_updates >= patience:
            return float(config.stall_entropy)
        return float(config.entropy_coeff)


def due_to_soften(stalled_updates: int, config: Any) -> bool:
    """Whether a run stalled for ``stalled_updates`` updates spreads its policy now
    (``stall_patience`` reached, with ``stall_shrink`` below 1)."""
    patience, shrink = getattr(config, "stall_patience", 0), getattr(config, "stall_shrink", 1.0)
    return patience > 0 and shrink < 1.0 and stalled_updates >= patience


def remember(memory: list, scored: Iterable[tuple[float, Any]], keep: int, replay: str,
             counter: int) -> tuple[list, int]:
    """The replay memory after adding ``scored`` (``(best reward, episode)`` pairs) to
    ``memory`` (``(score, order, episode)`` triples, modified): the ``keep`` best by their
    best reward (``replay="elite"``; ties: the newer) or the newest (``"recent"``), and
    the count of episodes remembered so far (``counter`` plus the new ones)."""
    for score, episode in scored:
        counter += 1
        memory.append((float(score), counter, episode))
    if replay == "elite":
        memory.sort(key=lambda m: (m[0], m[1]), reverse=True)
    else:
        memory.sort(key=lambda m: m[1], reverse=True)
    return memory[:keep], counter
