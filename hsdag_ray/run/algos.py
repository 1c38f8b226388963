"""The RLlib algorithm of a learned method, built from the run's settings.

:func:`algo_config` reads the method's entry in :mod:`policies.registry` (its
RLModule, environment, learner and network settings) and the run's
:class:`~hsdag_ray.run.config.TrainConfig`, and returns the RLlib config: REINFORCE
(:mod:`policies.reinforce`, the paper's) or PPO, EnvRunners pinned one per
measuring machine when a real backend measures (each holding the GPUs it
measures on when its devices are CUDA ones), failed EnvRunners restarted.
"""
from __future__ import annotations

import dataclasses
from typing import Optional

from hsdag_ray.run.config import MEASURE_RESOURCE, TrainConfig
from policies.registry import Method, load, reinforce_config

__all__ = ["algo_config"]


def algo_config(cfg: TrainConfig, method: Method, env_cfg: dict, real: bool,
                steps_per_episode: int, prior_device: int = -1,
                resources: Optional[dict] = None):
    """The RLlib ``AlgorithmConfig`` of ``method`` for this run; ``steps_per_episode``
    is the environment's (an iteration samples ``episodes_per_iteration`` episodes);
    ``prior_device``: the device sampling starts around (``--start best_single``), -1 none;
    ``resources``: what each EnvRunner asks for with a real backend (default: a
    measuring slot; see :func:`hsdag_ray.run.nodes.measuring_resources`). With a real
    backend on CUDA devices each EnvRunner also asks for the GPUs it measures on
    (:func:`envs.gpus.measuring_gpus`), since Ray hides from an actor the GPUs it
    does not hold; RLlib then runs the EnvRunner's copy of the policy on that GPU too."""
    from ray.rllib.core.rl_module.rl_module import RLModuleSpec

    from envs.gpus import measuring_gpus
    from hsdag_ray.run.resolve import resolved
    from policies.reinforce import REINFORCEConfig

    cfg = resolved(cfg, prior_device)  # what --guide decides, written out for the method
    model_config = method.model_config(cfg) if method.model_config else {}
    algo = cfg.learning.algo or method.algo
    if algo == "ppo":
        from ray.rllib.algorithms.ppo import PPOConfig

        extra = method.ppo_config(cfg) if method.ppo_config else {}
        ac = PPOConfig().training(
            lr=cfg.learning.lr, entropy_coeff=cfg.learning.entropy_coeff, gamma=0.0, lambda_=0.0,
            train_batch_size_per_learner=steps_per_episode * cfg.learning.episodes_per_iteration,
            minibatch_size=steps_per_episode, num_epochs=4, **extra)
    else:
        learn, extra = reinforce_config(method, cfg)
        ac = REINFORCEConfig().training(**dataclasses.asdict(learn), steps_per_episode=steps_per_episode,
                                        **extra)
        if method.learner:
            ac = ac.training(learner_class=load(method.learner))
    measuring = real and cfg.run.env_runners > 0  # remote EnvRunners, on measuring machines
    ac = (ac.environment(load(method.env), env_config=env_cfg)
          .rl_module(rl_module_spec=RLModuleSpec(module_class=load(method.module),
                                                 model_config=model_config))
          .env_runners(num_env_runners=cfg.run.env_runners, rollout_fragment_length=steps_per_episode,
                       batch_mode="complete_episodes", num_cpus_per_env_runner=0 if real else 1,
                       num_gpus_per_env_runner=measuring_gpus(env_cfg) if measuring else 0,
                       custom_resources_per_env_runner=(
                           dict(resources or {MEASURE_RESOURCE: 1}) if measuring else {}))
          .fault_tolerance(restart_failed_env_runners=True, delay_between_env_runner_restarts_s=1.0)
          .debugging(seed=cfg.run.seed))
    import torch

    if torch.cuda.is_available():
        ac = ac.learners(num_gpus_per_learner=1)
    return ac
