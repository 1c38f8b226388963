"""The RNN placer's advantages: rewards less a moving-average baseline (Mirhoseini et al.,
ICML 2017), described in :mod:`policies.rnn.learner`.

The RLlib learner (:class:`policies.rnn.learner.RNNPlacerTorchLearner`) and the
in-process loop (:class:`policies.local_module.LocalModule`) both call
:class:`EMAAdvantages`. Nothing here imports Ray.
"""
from __future__ import annotations

import math
from typing import Optional

import numpy as np
import torch

__all__ = ["EMABaseline", "EMAAdvantages", "BASELINE_DECAY"]

#: weight of the old average when a placement's reward is folded into the baseline
BASELINE_DECAY = 0.95


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


class EMAAdvantages:
    """The RNN placer's advantages of a batch: each placement's reward less the
    :class:`EMABaseline` (scored in the batch's order, then folded into it), divided by
    their root mean square over the batch; 0 where ``mask`` is 0."""

    def __init__(self, decay: float = BASELINE_DECAY) -> None:
        self.baseline = EMABaseline(decay)

    def __call__(self, rewards: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        valid = mask > 0.5
        adv = torch.zeros_like(rewards)
        r = rewards[valid].detach().cpu().numpy()
        if r.size == 0:
            return adv
        a = torch.as_tensor(self.baseline.advantages(r), dtype=rewards.dtype, device=rewards.device)
        rms = torch.sqrt((a**2).mean())
        adv[valid] = a / (rms + 1e-8) if float(rms) > 1e-12 else a
        return adv.detach()
