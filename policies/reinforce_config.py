"""REINFORCE's settings: one class for every loop that trains a policy by REINFORCE.

The RLlib algorithm (:class:`policies.reinforce.REINFORCEConfig` takes its defaults and
checks from here), the in-process training (:mod:`policies.reinforce_core`) and the
``learning`` section of a run's settings (:class:`hsdag_ray.run.settings.LearningSettings`
adds what only a run decides) all read :class:`ReinforceConfig`. Each field's help is
the string right under it. Importing this module imports nothing heavy.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from envs.env_config import EnvConfig
from policies.advantages import ADVANTAGES, REPLAYS, Advantage, Replay

__all__ = ["ReinforceConfig"]


@dataclass(frozen=True)
class ReinforceConfig:
    """How REINFORCE updates a policy (what each setting does: :mod:`policies.reinforce`)."""

    lr: float = 1e-3
    """Adam learning rate (HSDAG's paper: 1e-3)."""
    entropy_coeff: float = 0.01
    """entropy bonus weight (keeps the policy moving when a whole batch fails)."""
    advantages: Advantage = "centered"
    """how REINFORCE weighs each placement: centered (the reward minus the batch mean, a
    plain REINFORCE baseline), normalized (also over the batch's standard deviation), rank
    (centred ranks: fitness shaping) or elite (the cross-entropy method's top quarter)."""
    episode_len: int = EnvConfig.episode_len
    """placements per episode (HSDAG's paper: 20)."""
    episodes_per_iteration: int = 1
    """episodes per policy update."""
    num_epochs: int = 1
    """optimiser passes over each update's batch (1: REINFORCE's one step)."""
    replay_episodes: int = 0
    """earlier episodes every update also trains on, ranked with the new ones (measured
    placements re-used at no measurement cost; 0 = off)."""
    replay: Replay = "elite"
    """which earlier episodes: elite (those with the best placements) or recent."""
    stall_patience: int = 0
    """updates without a new best placement after which the entropy bonus weight becomes
    stall_entropy, until a new best is found (0 = off; see policies/reinforce.py)."""
    stall_entropy: float = 0.1
    """the entropy bonus weight while stalled."""
    stall_shrink: float = 1.0
    """below 1, a stalled run also scales the policy's output layers by this factor (the
    placement distribution spreads again, keeping its preferences), then counts stalled
    updates afresh."""

    def __post_init__(self) -> None:
        error = self.problem()
        if error:
            raise ValueError(error)

    def problem(self) -> str:
        """What is wrong with these settings, in one sentence ("" when nothing is)."""
        checks = (
            (self.lr > 0, "lr must be positive"),
            (self.entropy_coeff >= 0, "entropy_coeff must be 0 or more"),
            (self.advantages in ADVANTAGES,
             f"unknown advantages {self.advantages!r}; choose one of {', '.join(ADVANTAGES)}"),
            (self.episode_len >= 1 and self.episodes_per_iteration >= 1,
             "episode_len and episodes_per_iteration must be at least 1"),
            (self.replay_episodes >= 0 and self.num_epochs >= 1,
             "replay_episodes must be 0 or more and num_epochs at least 1"),
            (self.replay in REPLAYS, f"unknown replay {self.replay!r}; choose one of {', '.join(REPLAYS)}"),
            (self.stall_patience >= 0 and self.stall_entropy >= 0,
             "stall_patience and stall_entropy must be 0 or more"),
            (0 < self.stall_shrink <= 1, "stall_shrink must be above 0 and at most 1"),
        )
        return next((message for ok, message in checks if not ok), "")

    @classmethod
    def of(cls, settings: Any, **changes: Any) -> "ReinforceConfig":
        """The REINFORCE settings of ``settings`` (anything with these fields as attributes,
        e.g. a run's ``learning`` section), with ``changes`` over them."""
        values = {f.name: getattr(settings, f.name) for f in dataclasses.fields(cls)
                  if hasattr(settings, f.name)}
        return cls(**{**values, **changes})
