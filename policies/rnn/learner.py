r"""How the RNN placer learns: REINFORCE with a moving-average baseline.

As in Mirhoseini et al. (ICML 2017), every placement :math:`a` (a whole
placement, one environment step) is rewarded with
:math:`R(a) = -\sqrt{\mathrm{runtime}(a)}` (the environment's ``neg_sqrt``
reward, in seconds; a placement that fails is rewarded as the environment's
fixed failing runtime, see :mod:`envs.placement_env`), and the policy follows

.. math::

    \nabla J = \operatorname{mean}_a[(R(a) - B)\,\nabla \log \pi(a)],

:math:`B` an exponential moving average of the rewards seen so far
(:class:`policies.rnn.baseline.EMABaseline`: each update's placements are scored against the
average of the placements before them, then folded into it one by one with
weight ``1 - decay``). Faster placements have a higher reward, so a placement
faster than usual has a positive advantage and its probability rises: the
loss is :math:`-\operatorname{mean}[(R - B)\log\pi]`, minimised. (Minimising
:math:`+(R - B)\log\pi`, or rewarding the runtime itself instead of its
negative, pushes the policy toward slow placements.)

The advantages are divided by their root mean square over the update (their
sign and order are kept), so the entropy weight ``entropy_coeff`` of
:mod:`policies.reinforce` weighs the same against the policy gradient whatever
the runtimes are; the run's ``advantages`` setting (HSDAG's batch advantages)
does not apply. The baseline is part of the learner's checkpoint.
"""
from __future__ import annotations

from typing import Any, Dict

import torch
from ray.rllib.utils.annotations import override

from policies.reinforce import REINFORCEConfig, REINFORCETorchLearner
from policies.rnn.baseline import BASELINE_DECAY, EMAAdvantages, EMABaseline

__all__ = ["EMABaseline", "RNNPlacerTorchLearner", "BASELINE_DECAY"]

_STATE_KEY = "rnn_ema_baseline"


class RNNPlacerTorchLearner(REINFORCETorchLearner):
    """REINFORCE with :class:`EMABaseline` advantages (see the module docstring);
    reads ``baseline_decay`` from the algorithm's ``learner_config_dict``."""

    @override(REINFORCETorchLearner)
    def build(self) -> None:
        super().build()
        decay = float(self.config.learner_config_dict.get("baseline_decay", BASELINE_DECAY))
        self.rnn_advantages = EMAAdvantages(decay)
        self.baseline = self.rnn_advantages.baseline

    @override(REINFORCETorchLearner)
    def step_advantages(self, batch: Dict[str, Any], rewards: torch.Tensor, mask: torch.Tensor,
                        config: REINFORCEConfig) -> torch.Tensor:
        adv = self.rnn_advantages(rewards, mask)
        if self.baseline.value is not None:
            self.metrics.log_value("baseline", float(self.baseline.value), window=1)
        return adv

    @override(REINFORCETorchLearner)
    def get_state(self, components=None, *, not_components=None, **kwargs) -> Dict[str, Any]:
        state = super().get_state(components, not_components=not_components, **kwargs)
        state[_STATE_KEY] = self.baseline.state_dict()
        return state

    @override(REINFORCETorchLearner)
    def set_state(self, state: Dict[str, Any]) -> None:
        state = dict(state)
        saved = state.pop(_STATE_KEY, None)
        if saved is not None:
            self.baseline.load_state_dict(saved)
        super().set_state(state)
