"""REINFORCE as an RLlib algorithm (new API stack), as HSDAG trains.

Each training iteration samples ``episodes_per_iteration`` complete episodes from
the EnvRunners (the measuring actors); the central learner minimises

    loss = -mean_t[ log pi(a_t | s_t) * A_t ] - entropy_coeff * mean_t[ H(pi(.|s_t)) ]

with Adam (the loss and what is kept between updates: :mod:`policies.reinforce_core`,
which the in-process loops call too), and the new weights go back to the EnvRunners. Rewards are per
placement, without discounting (each placement is measured on its own); ``log pi``
and ``H`` are sums over the placement's independent group decisions. The
advantages ``A_t`` (``advantages``) are the rewards less the batch mean by default
(``"centered"``: a baseline), or ``"normalized"`` (mean/std), ``"rank"`` (centred
ranks: fitness shaping, so a failed placement's large penalty does not drown the
differences between feasible ones) or ``"elite"`` (the cross-entropy
method's 1 for the best :data:`policies.advantages.ELITE_FRACTION`, 0 otherwise); all use a baseline
independent of the action. Options: ``num_epochs`` passes over each batch;
``replay_episodes`` earlier episodes ranked with the new ones (``replay``:
``"elite"`` or ``"recent"``, off-policy without importance weights, not
checkpointed); and, after ``stall_patience`` updates without a new best, a larger
entropy weight (``stall_entropy``) and the module's ``soften_policy(stall_shrink)``,
which spreads a settled policy again. Replay and the stall response are off by
default; what each option was measured to do is in docs/results/learning.md.

Built like RLlib's own ``examples/algorithms/classes/vpg.py``: a config, an
:class:`~ray.rllib.algorithms.Algorithm` with ``training_step`` and a
:class:`~ray.rllib.core.learner.torch.torch_learner.TorchLearner`.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Dict

import torch
from policies.advantages import ADVANTAGES, advantages
from policies.reinforce_config import ReinforceConfig
from policies.reinforce_core import ReinforceCore
from ray.rllib.algorithms import Algorithm
from ray.rllib.algorithms.algorithm_config import AlgorithmConfig, NotProvided
from ray.rllib.core.columns import Columns
from ray.rllib.core.learner.torch.torch_learner import TorchLearner
from ray.rllib.core.rl_module.rl_module import RLModuleSpec
from ray.rllib.execution.rollout_ops import synchronous_parallel_sample
from ray.rllib.utils.annotations import override
from ray.rllib.utils.metrics import (ALL_MODULES, ENV_RUNNER_RESULTS, ENV_RUNNER_SAMPLING_TIMER,
                                     LEARNER_RESULTS, LEARNER_UPDATE_TIMER,
                                     NUM_ENV_STEPS_SAMPLED_LIFETIME, SYNCH_WORKER_WEIGHTS_TIMER,
                                     TIMERS)

__all__ = ["REINFORCEConfig", "REINFORCE", "REINFORCETorchLearner", "ADVANTAGES", "advantages"]

class REINFORCEConfig(AlgorithmConfig):
    """Settings of :class:`REINFORCE`: those of
    :class:`policies.reinforce_config.ReinforceConfig` (its defaults and checks), the
    environment's ``steps_per_episode`` and RLlib's own."""

    def __init__(self, algo_class=None) -> None:
        super().__init__(algo_class=algo_class or REINFORCE)
        for name, value in dataclasses.asdict(ReinforceConfig()).items():
            setattr(self, name, value)
        self.steps_per_episode = self.episode_len
        self.batch_mode = "complete_episodes"
        self.num_env_runners = 0

    @override(AlgorithmConfig)
    def training(self, *, steps_per_episode=NotProvided, **kwargs) -> "REINFORCEConfig":
        """Any field of :class:`~policies.reinforce_config.ReinforceConfig` (checked as it
        checks them), ``steps_per_episode`` (the environment's episode length) and
        RLlib's own settings (e.g. ``num_epochs``, ``learner_class``)."""
        names = {f.name for f in dataclasses.fields(ReinforceConfig)}
        mine = {k: kwargs.pop(k) for k in list(kwargs) if k in names and kwargs[k] is not NotProvided}
        learn = ReinforceConfig.of(self, **mine)  # raises ValueError on a bad value
        super().training(**kwargs)
        for name in mine:
            setattr(self, name, getattr(learn, name))
        if steps_per_episode is not NotProvided:
            self.steps_per_episode = int(steps_per_episode)
        return self

    @override(AlgorithmConfig)
    def get_default_rl_module_spec(self) -> RLModuleSpec:
        from policies.hsdag.module import HSDAGRLModule

        return RLModuleSpec(module_class=HSDAGRLModule)

    @override(AlgorithmConfig)
    def get_default_learner_class(self):
        return REINFORCETorchLearner


class REINFORCETorchLearner(TorchLearner):
    """The policy-gradient loss of :mod:`policies.reinforce_core` with batch advantages
    (:func:`advantages`).

    A method with advantages of its own (e.g. returns over an episode's steps
    minus a per-step baseline) overrides :meth:`step_advantages`. Its
    :class:`~policies.reinforce_core.ReinforceCore` (``core``) counts stalled updates:
    from ``stall_patience`` on, the entropy weight is ``stall_entropy`` and, with
    ``stall_shrink`` below 1, every module's ``soften_policy`` spreads it (see
    "Exploration when stalled" in the module docstring).
    """

    @override(TorchLearner)
    def build(self) -> None:
        super().build()
        self.core = ReinforceCore(self.config)

    @override(TorchLearner)
    def before_gradient_based_update(self, *, timesteps: Dict[str, Any]) -> None:
        super().before_gradient_based_update(timesteps=timesteps)
        self.core.begin_update(self.soften_modules)

    def soften_modules(self, shrink: float) -> None:
        """Spreads every module's policy (its ``soften_policy(shrink)``)."""
        for module_id in list(self.module.keys()):
            soften = getattr(self.module[module_id], "soften_policy", None)
            if soften is not None:
                soften(shrink)

    def step_advantages(self, batch: Dict[str, Any], rewards: torch.Tensor, mask: torch.Tensor,
                        config: REINFORCEConfig) -> torch.Tensor:
        """``A_t`` of every step of the batch (shape of ``rewards``, 0 where
        ``mask`` is 0): here the batch advantages of ``config.advantages``."""
        return advantages(rewards, mask, config.advantages)

    @override(TorchLearner)
    def compute_loss_for_module(self, *, module_id: str, config: REINFORCEConfig,
                                batch: Dict[str, Any], fwd_out: Dict[str, Any]) -> torch.Tensor:
        module = self.module[module_id]
        dist_cls = module.get_train_action_dist_cls()
        dist = dist_cls.from_logits(fwd_out[Columns.ACTION_DIST_INPUTS])
        logp = dist.logp(batch[Columns.ACTIONS])
        grouping_logp = fwd_out.get("grouping_logp")  # a sampled grouping's (HSDAG's option)
        if grouping_logp is not None:
            logp = logp + grouping_logp.to(logp.dtype)
        rewards = batch[Columns.REWARDS].to(logp.dtype)
        mask = batch.get(Columns.LOSS_MASK)
        mask = torch.ones_like(rewards) if mask is None else mask.to(logp.dtype)
        count = mask.sum().clamp_min(1.0)
        mean = (rewards * mask).sum() / count
        adv = self.step_advantages(batch, rewards, mask, config)
        weight = self.core.entropy_weight(config)
        loss, pg_loss, entropy = self.core.loss(logp, dist.entropy(), rewards, mask, adv, weight)
        self.metrics.log_dict({"policy_loss": pg_loss.detach(), "entropy": entropy.detach(),
                               "reward_mean": mean.detach(), "entropy_weight": weight},
                              key=module_id, window=1)
        if grouping_logp is not None:
            g_logp = (grouping_logp.to(mask.dtype) * mask).sum() / count
            self.metrics.log_value((module_id, "grouping_logp"), g_logp.detach(), window=1)
        groups = getattr(dist, "num_groups", None)  # the grouped placement distribution's
        if isinstance(groups, torch.Tensor):
            g = ((groups.to(mask.dtype) * mask).sum() / count).detach()
            self.metrics.log_value((module_id, "num_groups"), g, window=1)
        return loss


class REINFORCE(Algorithm):
    """Sample complete episodes from the measuring EnvRunners, update centrally."""

    @classmethod
    @override(Algorithm)
    def get_default_config(cls) -> REINFORCEConfig:
        return REINFORCEConfig()

    @override(Algorithm)
    def training_step(self) -> None:
        cfg = self.config
        steps = cfg.episodes_per_iteration * max(1, int(cfg.steps_per_episode))
        with self.metrics.log_time((TIMERS, ENV_RUNNER_SAMPLING_TIMER)):
            episodes, runner_results = synchronous_parallel_sample(
                worker_set=self.env_runner_group, max_env_steps=steps,
                sample_timeout_s=cfg.sample_timeout_s, _uses_new_env_runners=True,
                _return_metrics=True)
        if not episodes:  # every EnvRunner failed this round; they are restarted
            return
        self.metrics.aggregate(runner_results, key=ENV_RUNNER_RESULTS)
        memory = self._replay_memory()
        with self.metrics.log_time((TIMERS, LEARNER_UPDATE_TIMER)):
            learner_results = self.learner_group.update(
                episodes=list(episodes) + memory,
                num_epochs=cfg.num_epochs,
                timesteps={NUM_ENV_STEPS_SAMPLED_LIFETIME: self.metrics.peek(
                    (ENV_RUNNER_RESULTS, NUM_ENV_STEPS_SAMPLED_LIFETIME))})
        self._remember(memory, episodes)
        self.metrics.aggregate(learner_results, key=LEARNER_RESULTS)
        with self.metrics.log_time((TIMERS, SYNCH_WORKER_WEIGHTS_TIMER)):
            modules = set(learner_results[0].keys()) - {ALL_MODULES}
            self.env_runner_group.sync_weights(from_worker_or_learner_group=self.learner_group,
                                               policies=modules, inference_only=True)

    # -- replay memory (see the module docstring) ----------------------------------
    def _replay_memory(self) -> list:
        """The episodes the next update replays (its :class:`ReinforceCore`'s memory)."""
        if not hasattr(self, "_core"):
            self._core = ReinforceCore(self.config)
        return self._core.replayed()

    def _remember(self, memory: list, episodes: list) -> None:
        """Keep ``replay_episodes`` of the memory and the new episodes: the best
        by their best reward (``elite``; ties: the newer) or the newest."""
        self._core.remember((max(rewards), e) for e in episodes if len(rewards := e.get_rewards()) > 0)
