r"""How the RNN placer learns: REINFORCE with a moving-average baseline.

As in Mirhoseini et al. (ICML 2017), every placement :math:`a` (a whole
placement, one environment step) is rewarded with
:math:`R(a) = -\sqrt{\mathrm{runtime}(a)}` (the environment's ``neg_sqrt``
reward, in seconds; a placement that fails is rewarded as the environment's
fixed failing runtime, see :mod:`envs.placement_env`), and the policy follows

.. math::

    \nabla J = \operatorname{mean}_a[(R(a) - B)\,\nabla \log \pi(a)],

:math:`B` an exponential moving average of the rewards seen so far
(:class:`EMABaseline`: each update's placements are scored against the
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

import math
from typing import Any, Dict, Optional

import numpy as np
import torch
from ray.rllib.utils.annotations import override

from policies.reinforce import REINFORCEConfig, REINFORCETorchLearner

__all__ = ["EMABaseline", "RNNPlacerTorchLearner", "BASELINE_DECAY"]

#: weight of the old average when a placement's reward is folded into the baseline
BASELINE_DECAY = 0.95
_STATE_KEY = "rnn_ema_baseline"


class EMABaseline:
    """An exponential moving average of rewards, used as a REINFORCE baseline.

    ``advantages(rewards)`` returns ``rewards - B`` with ``B`` the average
    before this call (the mean of ``rewards`` on the first call), then updates
    ``B <- decay * B + (1 - decay) * r`` for each reward in order.
    """

    def __init__(self, decay: float = BASELINE_DECAY, value: Optional[float] = None) -> None:
        if not 0.0 <= decay < 1.0:
            raise ValueError("the baseline's decay must lie in [0, 1)")
        self.decay = float(decay)
        self.value = value

    def advantages(self, rewards: np.ndarray) -> np.ndarray:
        r = np.asarray(rewards, dtype=np.float64).reshape(-1)
        if r.size == 0:
            return r
        if self.value is None:
            self.value = float(r.mean())
        adv = r - self.value
        b = self.value
        for value in r:
            b = self.decay * b + (1.0 - self.decay) * float(value)
        self.value = b
        return adv

    def state_dict(self) -> dict:
        return {"decay": self.decay, "value": self.value}

    def load_state_dict(self, state: dict) -> None:
        self.decay = float(state["decay"])
        v = state.get("value")
        self.value = None if v is None or not math.isfinite(float(v)) else float(v)


class RNNPlacerTorchLearner(REINFORCETorchLearner):
    """REINFORCE with :class:`EMABaseline` advantages (see the module docstring);
    reads ``baseline_decay`` from the algorithm's ``learner_config_dict``."""

    @override(REINFORCETorchLearner)
    def build(self) -> None:
        super().build()
        decay = float(self.config.learner_config_dict.get("baseline_decay", BASELINE_DECAY))
        self.baseline = EMABaseline(decay)

    @override(REINFORCETorchLearner)
    def step_advantages(self, batch: Dict[str, Any], rewards: torch.Tensor, mask: torch.Tensor,
                        config: REINFORCEConfig) -> torch.Tensor:
        valid = mask > 0.5
        adv = torch.zeros_like(rewards)
        r = rewards[valid].detach().cpu().numpy()
        if r.size == 0:
            return adv
        a = torch.as_tensor(self.baseline.advantages(r), dtype=rewards.dtype, device=rewards.device)
        rms = torch.sqrt((a**2).mean())
        adv[valid] = a / (rms + 1e-8) if float(rms) > 1e-12 else a
        self.metrics.log_value("baseline", float(self.baseline.value), window=1)
        return adv.detach()

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
