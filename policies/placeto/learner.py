r"""How Placeto learns: REINFORCE on returns with a per-step baseline.

An episode of Placeto (:mod:`envs.placeto_env`) is ``T = n * passes`` steps,
step ``t`` placing one node and rewarded with the runtime improvement
:math:`r_t`. The learner (:class:`PlacetoTorchLearner`, a
:class:`~policies.reinforce.REINFORCETorchLearner`) minimises the REINFORCE
loss with entropy regularisation of :mod:`policies.reinforce`,

.. math::

    L = -\operatorname{mean}_t[\log\pi(a_t \mid s_t)\,A_t]
        - \beta\,\operatorname{mean}_t[H(\pi(\cdot \mid s_t))],

with Placeto's advantages

.. math::

    G_t = \sum_{k \ge t} \gamma^{k - t} r_k, \qquad
    A_t = \frac{G_t - b_t}{\sqrt{\operatorname{mean}_t (G_t - b_t)^2}},

:math:`G_t` the discounted (``gamma``, default 1) sum of the episode's future
rewards and :math:`b_t` the mean of :math:`G_t` at the same step index over
the last ``baseline_window`` episodes, this update's included (the paper's
code keeps 10). With ``gamma = 1``,
:math:`G_t = (T_{t-1} - T_{\mathrm{end}}) / T_{\mathrm{ref}}`: how much the
episode still improved from step ``t`` on. Every episode starts from the
same initial placement, so :math:`b_t` is the usual return at step ``t`` and
the advantage says whether this episode's later moves did better than usual.
The scale of the advantages is dropped (divided by their root mean square over
the batch) so the entropy weight :math:`\beta` (``entropy_coeff``) means what
it means for HSDAG whatever the runtimes; the run's ``advantages`` setting
(HSDAG's batch advantages) does not apply.

:class:`PlacetoAdvantages` computes :math:`G_t - b_t` from the episodes in the
learner's connector pipeline (once per update, before the batch is built) and
keeps the returns of recent episodes per step index. That history is not
part of a checkpoint: a resumed run refills it within ``baseline_window``
episodes.
"""
from __future__ import annotations

from collections import defaultdict, deque
from typing import Any, Deque, Dict, List

import numpy as np
import scipy.signal
import torch
from ray.rllib.connectors.connector_v2 import ConnectorV2
from ray.rllib.connectors.learner import AddColumnsFromEpisodesToTrainBatch
from ray.rllib.evaluation.postprocessing import Postprocessing
from ray.rllib.utils.annotations import override

from policies.reinforce import REINFORCEConfig, REINFORCETorchLearner

__all__ = ["PlacetoAdvantages", "PlacetoTorchLearner", "BASELINE_WINDOW", "discounted_returns"]

#: episodes the per-step baseline averages over (the paper's code: 10)
BASELINE_WINDOW = 10


def discounted_returns(rewards: np.ndarray, gamma: float) -> np.ndarray:
    """``G_t = sum_{k >= t} gamma**(k - t) * r_k`` of one episode's rewards ``[T]``."""
    r = np.asarray(rewards, dtype=np.float64)
    return scipy.signal.lfilter([1.0], [1.0, -gamma], r[::-1])[::-1].copy()


class PlacetoAdvantages(ConnectorV2):
    """Learner connector piece: ``Postprocessing.ADVANTAGES = G_t - b_t`` per step.

    For every episode of the batch it computes the returns :math:`G_t`
    (:func:`discounted_returns`), records them under their step index
    (``episode.t_started + i``) in a history of the last ``window`` episodes,
    then sets each step's advantage to its return minus the history's mean
    return at that step index (see the module docstring). Put it after
    ``AddColumnsFromEpisodesToTrainBatch`` (before the batch is batched).
    """

    def __init__(self, input_observation_space=None, input_action_space=None, *,
                 gamma: float = 1.0, window: int = BASELINE_WINDOW) -> None:
        super().__init__(input_observation_space, input_action_space)
        if not 0.0 <= gamma <= 1.0 or window < 1:
            raise ValueError("gamma must lie in [0, 1] and the baseline window be at least 1")
        self.gamma = float(gamma)
        self.window = int(window)
        self.history: Dict[int, Deque[float]] = defaultdict(lambda: deque(maxlen=self.window))

    def baseline(self, steps: np.ndarray) -> np.ndarray:
        """``b_t`` at each step index of ``steps`` (0 where no episode reached it)."""
        return np.array([np.mean(self.history[int(t)]) if self.history.get(int(t)) else 0.0
                         for t in steps])

    @override(ConnectorV2)
    def __call__(self, *, rl_module, episodes: List[Any], batch: Dict[str, Any], **kwargs):
        episodes_here = list(self.single_agent_episode_iterator(
            episodes, agents_that_stepped_only=False))
        returns = []
        for ep in episodes_here:
            g = discounted_returns(ep.get_rewards(), self.gamma)
            steps = ep.t_started + np.arange(len(ep))
            for t, value in zip(steps.tolist(), g.tolist()):
                self.history[t].append(value)
            returns.append((g, steps))
        for ep, (g, steps) in zip(episodes_here, returns):
            self.add_n_batch_items(batch=batch, column=Postprocessing.ADVANTAGES,
                                   items_to_add=(g - self.baseline(steps)).astype(np.float32),
                                   num_items=len(ep), single_agent_episode=ep)
        return batch

    @override(ConnectorV2)
    def get_ctor_args_and_kwargs(self):
        return ((self.input_observation_space, self.input_action_space),
                {"gamma": self.gamma, "window": self.window})


class PlacetoTorchLearner(REINFORCETorchLearner):
    """REINFORCE with Placeto's advantages (returns minus a per-step baseline,
    unit root mean square; see the module docstring). Reads ``gamma`` from the
    algorithm config and ``baseline_window`` from its ``learner_config_dict``."""

    @override(REINFORCETorchLearner)
    def build(self) -> None:
        super().build()
        if self._learner_connector is not None and self.config.add_default_connectors_to_learner_pipeline:
            window = int(self.config.learner_config_dict.get("baseline_window", BASELINE_WINDOW))
            self._learner_connector.insert_after(
                AddColumnsFromEpisodesToTrainBatch,
                PlacetoAdvantages(gamma=self.config.gamma, window=window))

    @override(REINFORCETorchLearner)
    def step_advantages(self, batch: Dict[str, Any], rewards: torch.Tensor, mask: torch.Tensor,
                        config: REINFORCEConfig) -> torch.Tensor:
        if Postprocessing.ADVANTAGES not in batch:
            raise ValueError("the batch has no Placeto advantages: PlacetoTorchLearner learns "
                             "from episodes through its connector pipeline (PlacetoAdvantages)")
        adv = torch.as_tensor(batch[Postprocessing.ADVANTAGES], device=rewards.device)
        adv = adv.to(rewards.dtype).reshape(rewards.shape) * mask
        rms = torch.sqrt((adv**2).sum() / mask.sum().clamp_min(1.0))
        return (adv / (rms + 1e-8)).detach()
