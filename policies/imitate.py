"""Pre-training by imitation: a policy learns the exact optima of the training graphs.

On a family's training graphs the simulator's costs are known, so the exact
solver (:func:`policies.solvers.exact.solve`, the MILP of the sequential objective)
gives each graph's optimal placement without a single measurement. Before
(or instead of) reinforcement learning, :func:`imitate` trains the policy's
RLModule to give these placements a high probability: the loss is the mean
over graphs of ``-log p(optimum) / nodes`` (the mean negative log-probability of
a node's device) under the module's own action
distribution (HSDAG's grouped placement with node moves scores any
placement exactly; GDP's one-shot distribution likewise). A method that
places one node per step (Placeto) learns each step's device along the
optimum, its environment walked with the optimum's devices (teacher
forcing), so every observation it learns from is one it meets on the way.

Reinforcement alone over a family tends to converge to the fastest single
device, which imitation avoids; reinforcement after imitation can drift back to
it (GDP's PPO does), so imitation is an option, not the default. The entropy
bonus (:data:`IMITATION_ENTROPY`) keeps an imitated policy able to move during
fine-tuning. What imitation was measured to do is in
docs/results/design-choices.md and docs/results/transfer.md.
"""
from __future__ import annotations

import time
from typing import Any, Callable, Mapping, Sequence

import numpy as np

__all__ = ["optimum_of", "demonstrations", "imitate", "IMITATION_ENTROPY"]


def optimum_of(env, time_limit: float = 30.0) -> np.ndarray:
    """The exact optimum of ``env``'s graph on its profile (sequential objective)."""
    from hsdag_core.device_profile import Profile, cost_graph
    from policies.solvers.exact import solve

    cg = cost_graph(env.graph, Profile.from_json(env.config.profile), env.devices)
    return np.asarray(solve(cg, "sequential", "milp", time_limit=time_limit).placement, dtype=np.int64)


def demonstrations(env, placement: np.ndarray) -> list[tuple[dict, np.ndarray]]:
    """``(observation, action)`` pairs that lead ``env`` to ``placement``: one pair
    (the whole padded placement) for a policy that places all nodes at once, one
    per step along a teacher-forced episode for one that places a node per step."""
    obs, _ = env.reset(seed=0)
    if not hasattr(env, "current_node"):
        action = np.zeros(env.max_nodes, dtype=np.int64)
        action[: len(placement)] = placement
        return [(obs, action)]
    out = []
    for _ in range(env.steps_per_episode):
        device = int(placement[env.current_node])
        out.append((obs, np.asarray(device, dtype=np.int64)))
        obs = env.place_unmeasured(device)
    return out


def _batch(pairs: Sequence[tuple[Mapping[str, np.ndarray], np.ndarray]]):
    import torch

    obs = {k: torch.as_tensor(np.stack([np.asarray(o[k]) for o, _ in pairs])) for k in pairs[0][0]}
    return obs, torch.as_tensor(np.stack([a for _, a in pairs]))


#: weight of the entropy bonus in imitation (per node): it stops a node's probability
#: of its optimal device near 0.95 instead of 1, so the policy still explores when it
#: is fine-tuned (imitated to certainty, HSDAG sampled 29 distinct placements in 200
#: and fine-tuning stalled)
IMITATION_ENTROPY = 0.35


def imitate(module, envs: Sequence[Any], steps: int, lr: float = 3e-3, batch_size: int = 16,
            seed: int = 0, entropy_coeff: float = IMITATION_ENTROPY,
            say: Callable[[str], None] = lambda s: None) -> dict[str, Any]:
    """Train ``module`` (in place) for ``steps`` Adam steps to place every graph of
    ``envs`` (per-graph environments with a simulator profile) as its exact optimum,
    minus ``entropy_coeff`` times the entropy per node; return the optima and the
    negative log-likelihood per node before and after."""
    import torch
    from ray.rllib.core.columns import Columns

    t0 = time.time()
    optima = [optimum_of(env) for env in envs]
    pairs, weights = [], []
    for env, opt in zip(envs, optima):
        demo = demonstrations(env, opt)
        pairs += demo
        # the log-probability per node: a one-shot pair scores all the graph's nodes
        weights += [1.0 / env.graph.num_nodes if len(demo) == 1 else 1.0] * len(demo)
    say(f"imitation: {len(pairs)} demonstrations from the optima of {len(envs)} graphs "
        f"({time.time() - t0:.0f} s)")
    w_all = torch.as_tensor(weights, dtype=torch.float32)
    opt = torch.optim.Adam(module.parameters(), lr=lr)
    rng = np.random.default_rng(seed)
    torch.manual_seed(seed)
    module.train()
    from ray.rllib.core.rl_module.torch import TorchRLModule

    # a module with an exploring pass of its own (TorchRLModule's runs _forward without gradients)
    explores = type(module)._forward_exploration is not TorchRLModule._forward_exploration

    def loss_of(idx, greedy: bool = False) -> torch.Tensor:
        obs, actions = _batch([pairs[i] for i in idx])
        # the module's own passes with gradients (RLlib's public ones run without): the
        # exploring one (HSDAG: groupings parsed with noise) and, every other step, the
        # greedy one that zero-shot placement uses
        run = module._forward if greedy or not explores else module._forward_exploration
        out = run({Columns.OBS: obs})
        dist = module.action_dist_cls.from_logits(out[Columns.ACTION_DIST_INPUTS])
        w = w_all[idx]
        nll = -(dist.logp(actions) * w).sum() / len(idx)
        if entropy_coeff:
            return nll, nll - entropy_coeff * (dist.entropy() * w).sum() / len(idx)
        return nll, nll

    with torch.no_grad():
        first = float(loss_of(np.arange(len(pairs)))[0])
    last = first
    for step in range(steps):
        idx = rng.choice(len(pairs), size=min(batch_size, len(pairs)), replace=False)
        nll, loss = loss_of(idx, greedy=step % 2 == 1)
        opt.zero_grad()
        loss.backward()
        opt.step()
        last = float(nll.detach())
        if (step + 1) % 50 == 0:
            say(f"  imitation step {step + 1}: loss {last:.4f}")
    module.eval()
    return {"optima": [o.tolist() for o in optima], "loss_before": first, "loss_after": last,
            "demonstrations": len(pairs), "steps": steps, "wall_s": time.time() - t0}
