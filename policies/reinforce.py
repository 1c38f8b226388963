"""REINFORCE as an RLlib algorithm (new API stack), as HSDAG trains.

Each training iteration samples ``episodes_per_iteration`` complete episodes from
the EnvRunners (the measuring actors); the central learner minimises

    loss = -mean_t[ log pi(a_t | s_t) * A_t ] - entropy_coeff * mean_t[ H(pi(.|s_t)) ]

with Adam, and the new weights go back to the EnvRunners. Rewards are per
placement, without discounting (each placement is measured on its own); ``log pi``
and ``H`` are sums over the placement's independent group decisions. The
advantages ``A_t`` (``advantages``) are centred ranks of the batch's rewards by
default (``"rank"``: fitness shaping, so a failed placement's large penalty does
not drown the differences between feasible ones), or ``"normalized"``
(mean/std), ``"centered"`` (mean baseline) or ``"elite"`` (the cross-entropy
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

from typing import Any, Dict

import torch
from policies.advantages import ADVANTAGES, REPLAYS, advantages
from policies.reinforce_state import StallCount, due_to_soften, remember
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
    """Settings of :class:`REINFORCE` (defaults: the paper's Adam, lr 1e-3;
    rank advantages and a small entropy bonus, see the module docstring)."""

    def __init__(self, algo_class=None) -> None:
        super().__init__(algo_class=algo_class or REINFORCE)
        self.lr = 1e-3
        self.episodes_per_iteration = 1
        self.entropy_coeff = 0.01
        self.advantages = "rank"
        self.steps_per_episode = 20
        self.batch_mode = "complete_episodes"
        self.num_env_runners = 0
        self.replay_episodes = 0
        self.replay = "elite"
        self.num_epochs = 1  # AlgorithmConfig's setting: passes over each update's batch
        self.stall_patience = 0
        self.stall_entropy = 0.1
        self.stall_shrink = 1.0

    @override(AlgorithmConfig)
    def training(self, *, episodes_per_iteration=NotProvided, entropy_coeff=NotProvided,
                 advantages=NotProvided, normalize_advantages=NotProvided,
                 steps_per_episode=NotProvided, replay_episodes=NotProvided,
                 replay=NotProvided, stall_patience=NotProvided, stall_entropy=NotProvided,
                 stall_shrink=NotProvided, **kwargs) -> "REINFORCEConfig":
        """``episodes_per_iteration``: complete episodes per update (over all
        EnvRunners); ``steps_per_episode``: the environment's episode length
        (its ``steps_per_episode``); ``entropy_coeff``: weight of the entropy bonus;
        ``advantages``: ``"rank"``, ``"normalized"`` or ``"centered"``;
        ``normalize_advantages`` (older switch): ``True`` = ``"normalized"``,
        ``False`` = ``"centered"``; ``replay_episodes``: earlier episodes each
        update also trains on, ``replay``: which (``"elite"`` or ``"recent"``);
        RLlib's ``num_epochs``: passes over each update's batch; ``stall_patience``:
        updates without a new best reward after which the entropy weight becomes
        ``stall_entropy`` (until a new best; 0 = never) and, with ``stall_shrink``
        below 1, the module's ``soften_policy(stall_shrink)`` is called (then the
        count starts again)."""
        super().training(**kwargs)
        if stall_patience is not NotProvided:
            if int(stall_patience) < 0:
                raise ValueError(f"stall_patience must be 0 or more, got {stall_patience}")
            self.stall_patience = int(stall_patience)
        if stall_entropy is not NotProvided:
            if float(stall_entropy) < 0:
                raise ValueError(f"stall_entropy must be 0 or more, got {stall_entropy}")
            self.stall_entropy = float(stall_entropy)
        if stall_shrink is not NotProvided:
            if not 0 < float(stall_shrink) <= 1:
                raise ValueError(f"stall_shrink must be in (0, 1], got {stall_shrink}")
            self.stall_shrink = float(stall_shrink)
        if replay_episodes is not NotProvided:
            if int(replay_episodes) < 0:
                raise ValueError(f"replay_episodes must be 0 or more, got {replay_episodes}")
            self.replay_episodes = int(replay_episodes)
        if replay is not NotProvided:
            if replay not in REPLAYS:
                raise ValueError(f"unknown replay {replay!r}; choose one of {', '.join(REPLAYS)}")
            self.replay = replay

        if episodes_per_iteration is not NotProvided:
            self.episodes_per_iteration = int(episodes_per_iteration)
        if entropy_coeff is not NotProvided:
            self.entropy_coeff = float(entropy_coeff)
        if steps_per_episode is not NotProvided:
            self.steps_per_episode = int(steps_per_episode)
        if normalize_advantages is not NotProvided:
            self.advantages = "normalized" if normalize_advantages else "centered"
        if advantages is not NotProvided:
            if advantages not in ADVANTAGES:
                raise ValueError(f"unknown advantages {advantages!r}; choose one of "
                                 f"{', '.join(ADVANTAGES)}")
            self.advantages = advantages
        return self

    @override(AlgorithmConfig)
    def get_default_rl_module_spec(self) -> RLModuleSpec:
        from policies.hsdag.module import HSDAGRLModule

        return RLModuleSpec(module_class=HSDAGRLModule)

    @override(AlgorithmConfig)
    def get_default_learner_class(self):
        return REINFORCETorchLearner


class REINFORCETorchLearner(StallCount, TorchLearner):
    """The policy-gradient loss with batch advantages (:func:`advantages`).

    A method with advantages of its own (e.g. returns over an episode's steps
    minus a per-step baseline) overrides :meth:`step_advantages`.

    With ``stall_patience`` the learner counts the updates since a batch last
    held a better reward than every earlier batch (the run's best placement);
    from ``stall_patience`` such updates on, the entropy weight is
    ``stall_entropy`` instead of ``entropy_coeff`` (see "Exploration when
    stalled" in the module docstring).
    """

    @override(TorchLearner)
    def before_gradient_based_update(self, *, timesteps: Dict[str, Any]) -> None:
        super().before_gradient_based_update(timesteps=timesteps)
        self.count_stall()
        self.soften_if_stalled(self.config)

    def soften_if_stalled(self, config: REINFORCEConfig) -> None:
        """After ``stall_patience`` stalled updates, with ``stall_shrink`` below 1,
        spreads every module's policy (its ``soften_policy``) and counts afresh."""
        shrink = getattr(config, "stall_shrink", 1.0)
        if due_to_soften(self._stalled_updates, config):
            for module_id in list(self.module.keys()):
                soften = getattr(self.module[module_id], "soften_policy", None)
                if soften is not None:
                    soften(shrink)
            self._stalled_updates = 0

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
        pg_loss = -(logp * adv * mask).sum() / count
        entropy = (dist.entropy() * mask).sum() / count
        if bool((mask > 0.5).any()):
            self._batch_best = max(self._batch_best, float(rewards[mask > 0.5].max()))
        weight = self.entropy_weight(config)
        loss = pg_loss - weight * entropy
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
                episodes=list(episodes) + [e for _, _, e in memory],
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
        """``[(score, order, episode)]`` the next update replays."""
        if not hasattr(self, "_memory"):
            self._memory, self._remembered = [], 0
        return list(self._memory)

    def _remember(self, memory: list, episodes: list) -> None:
        """Keep ``replay_episodes`` of the memory and the new episodes: the best
        by their best reward (``elite``; ties: the newer) or the newest."""
        k = self.config.replay_episodes
        if k <= 0:
            return
        scored = [(max(rewards), e) for e in episodes if len(rewards := e.get_rewards()) > 0]
        self._memory, self._remembered = remember(memory, scored, k, self.config.replay,
                                                  self._remembered)
