"""Where training time goes: policy forward, learner update, rollout scaling.

    python bench/bench_training.py                 # bert_base
    python bench/bench_training.py --model resnet50 --iterations 6

Prints, for the model's coarsened graph on the simulator:
- policy forward time per sampled placement (the EnvRunner's share of a step);
- learner update time per iteration (REINFORCE over one episode of 20);
- placements per second with 0 (driver only), 1 and 2 remote EnvRunners, and
  the scaling ratio of 2 over 1. On a 2-core machine the learner and the two
  EnvRunners share both cores, so perfect scaling is not expected.
"""
from __future__ import annotations

import argparse
import time

import numpy as np


def forward_time(env, module, reps: int = 20) -> float:
    import torch
    from ray.rllib.core.columns import Columns

    obs, _ = env.reset()
    batch = {Columns.OBS: {k: torch.as_tensor(v)[None] for k, v in obs.items()}}
    with torch.no_grad():
        module.forward_exploration(batch)
        t0 = time.perf_counter()
        for _ in range(reps):
            module.forward_exploration(batch)
    return (time.perf_counter() - t0) / reps


def run(model: str, runners: int, iterations: int) -> dict:
    import ray

    from envs.placement_env import EnvConfig, PlacementEnv
    from hsdag_ray.run.algos import algo_config
    from hsdag_ray.run.config import TrainConfig
    from hsdag_ray.run.resolve import env_config, resolve_backend
    from policies.registry import get

    cfg = TrainConfig.of(model=model, env_runners=runners, wandb="disabled", algo="reinforce")
    backend, devices, profile = resolve_backend(cfg, lambda m: None)
    ec = env_config(cfg, backend, devices, profile, "")
    algo = algo_config(cfg, get(cfg.run.method), ec, False, cfg.learning.episode_len).build_algo()
    out = {}
    if runners == 0:
        env = PlacementEnv(EnvConfig.from_dict(ec))
        out["forward_s"] = forward_time(env, algo.get_module())
        out["nodes"] = env.graph.num_nodes
    start = algo.train()["num_env_steps_sampled_lifetime"]  # warm-up
    t0 = time.perf_counter()
    learn = []
    for _ in range(iterations):
        r = algo.train()
        learn.append(r["timers"]["learner_update_timer"])
    steps = r["num_env_steps_sampled_lifetime"] - start
    out["placements_per_s"] = steps / (time.perf_counter() - t0)
    out["update_s"] = float(np.median(learn))
    algo.stop()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="bert_base")
    ap.add_argument("--iterations", type=int, default=5)
    args = ap.parse_args()
    import ray
    import torch

    torch.set_num_threads(1)
    from hsdag_ray.run.local_ray import start_local_ray

    start_local_ray(log_to_driver=False, runtime_env={"env_vars": {"OMP_NUM_THREADS": "1"}})
    res = {r: run(args.model, r, args.iterations) for r in (0, 1, 2)}
    ray.shutdown()
    print(f"model {args.model}: {res[0]['nodes']} nodes after co-location coarsening, simulator")
    print(f"policy forward per placement: {res[0]['forward_s'] * 1e3:.2f} ms")
    print(f"learner update per iteration (20 placements): {res[0]['update_s'] * 1e3:.1f} ms")
    for r in (0, 1, 2):
        print(f"env_runners={r}: {res[r]['placements_per_s']:.1f} placements/s")
    print(f"scaling 2 vs 1 EnvRunners: {res[2]['placements_per_s'] / res[1]['placements_per_s']:.2f}x")


if __name__ == "__main__":
    main()
