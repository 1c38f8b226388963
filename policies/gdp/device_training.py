"""Pre-training, zero-shot placement and fine-tuning of :class:`~policies.gdp.device_net.DeviceGDPNet`.

Runs in one process on the simulator, with PyTorch, numpy and scipy only. A
:class:`Problem` is one graph on one device set (:mod:`hsdag_core.device_sets`):
its cost graph, the network's inputs, the fastest single device that fits and,
for training and as a reference, the best placement the solvers find in a time
limit (:func:`teacher_of`). A placement is measured by the measurer every method
uses (:class:`envs.measurer.Measurer`): repaired to the devices' memory first
(:func:`hsdag_core.fit.repair`), then timed by the simulator, and cached by the
placement measured (its repair): a new proposal that repairs to a placement measured
before is answered from the cache and costs no budget, as in every other run. The
reward is the speedup over the fastest single device, one scale on every graph and set.

* :func:`imitate`: cross-entropy towards each training problem's teacher
  placement (GDP pre-training by imitation, as ``policies.imitate`` does for the
  RLlib methods; reinforcement alone converged to single devices there).
* :func:`reinforce`: REINFORCE with ``samples`` placements per step of one problem
  and their mean reward as the baseline, plus an entropy bonus.
* :func:`zero_shot`: the greedy placement, repaired, measured once.
* :func:`finetune`: a run of ``budget`` measured placements on one problem from the
  given weights (pre-trained, or fresh for "from scratch"), its greedy placement
  measured first, then reinforcement on samples; returns the best measured.
"""
from __future__ import annotations

import copy
import time
from dataclasses import dataclass, field
from typing import Callable, Optional, Sequence

import numpy as np
import torch

from envs.measurer import Measurer
from envs.simulator import Simulator, SimulatorBackend
from hsdag_core.costgraph import CostGraph

__all__ = ["Problem", "make_problem", "teacher_of", "imitate", "reinforce", "zero_shot", "finetune",
           "fastest_per_node", "TEACHER_METHODS"]

#: the solvers whose best placement is a problem's teacher (MILP within its time limit)
TEACHER_METHODS = ("milp", "alpha-expansion", "m-etf")


@dataclass
class Problem:
    """One graph on one device set, ready for the network and the simulator."""

    graph: str
    device_set: str
    costs: CostGraph
    x: torch.Tensor
    edge_index: torch.Tensor
    device_x: torch.Tensor
    pair_x: torch.Tensor
    sim: Simulator
    best_single_s: float = float("inf")
    teacher: Optional[np.ndarray] = None
    teacher_s: float = float("inf")
    teacher_info: dict = field(default_factory=dict)
    #: new placements measured at most (a run's budget); one past it is answered ``nan``
    limit: float = float("inf")
    #: repair, cache and budget of the problem's measurements (:meth:`forget` starts it over)
    measurer: Optional[Measurer] = field(default=None, repr=False)

    def __post_init__(self) -> None:
        self._backend = SimulatorBackend(self.costs)
        self._backend.sim = self.sim  # one simulator, built once
        self.forget()

    @property
    def size(self) -> int:
        return self.costs.num_devices

    def latency(self, placement: np.ndarray) -> float:
        """The simulator's latency of ``placement`` after the memory repair (cached by the
        repair); ``inf`` when no repair fits, ``nan`` when it is new and :attr:`limit`
        is reached."""
        self.measurer.budget = int(self.limit) if np.isfinite(self.limit) else None
        out = self.measurer.measure(placement)
        if out is None:
            return float("nan")
        m, _ = out
        return float(m.latency_s) if m.ok else float("inf")

    def measured(self) -> int:
        """Distinct placements measured so far."""
        return self.measurer.measured

    def forget(self) -> None:
        """Empties the cache and lifts the limit (a new run measures from nothing)."""
        self.measurer = Measurer(self._backend, f"{self.graph}/{self.device_set}",
                                 self.costs.num_nodes, repair_to=self.costs)
        self.limit = float("inf")


def teacher_of(costs: CostGraph, time_limit: float = 10.0) -> tuple[Optional[np.ndarray], float, dict]:
    """The best placement of :data:`TEACHER_METHODS` on ``costs`` (sequential objective):
    ``(placement, latency, info)``; ``info`` names the winner and gives the MILP's
    proven gap."""
    from policies.solvers.exact import solve

    best, best_s, info = None, float("inf"), {}
    for method in TEACHER_METHODS:
        t0 = time.perf_counter()
        res = solve(costs, "sequential", method, time_limit=time_limit)
        info[f"{method}_s"] = float(res.value)
        info[f"{method}_plan_s"] = time.perf_counter() - t0
        if method == "milp":
            info["milp_gap"] = float(res.gap)
            info["milp_optimal"] = bool(res.optimal)
        if res.feasible and res.value < best_s:
            best, best_s, info["teacher"] = np.asarray(res.placement, dtype=np.int64), float(res.value), method
    return best, best_s, info


def make_problem(graph, devset, teacher_time_limit: Optional[float] = 10.0,
                 boundary_s: float = 1e-4) -> Problem:
    """The :class:`Problem` of ``graph`` (a :class:`~hsdag_core.compgraph.CompGraph`) on
    ``devset`` (a :class:`~hsdag_core.device_sets.DeviceSet`) with ``boundary_s`` per
    stage boundary; ``teacher_time_limit`` None skips the solvers."""
    from hsdag_core.device_profile import cost_graph
    from hsdag_core.device_sets import device_features, device_set_profile, pair_features
    from hsdag_core.features import FeatureConfig, node_features

    costs = cost_graph(graph, device_set_profile(graph, devset, boundary_s))
    x, _ = node_features(graph, FeatureConfig())
    p = Problem(graph=graph.name, device_set=devset.name, costs=costs,
                x=torch.as_tensor(x, dtype=torch.float32),
                edge_index=torch.as_tensor(graph.edge_index(), dtype=torch.long),
                device_x=torch.as_tensor(device_features(costs)),
                pair_x=torch.as_tensor(pair_features(costs)), sim=Simulator(costs))
    singles = [costs.single_device(d) for d in range(costs.num_devices)]
    p.best_single_s = min(p.latency(s) for d, s in enumerate(singles)
                          if costs.memory_use(s)[d] <= costs.mem_capacity[d])
    p.forget()
    if teacher_time_limit is not None:
        p.teacher, p.teacher_s, p.teacher_info = teacher_of(costs, teacher_time_limit)
    return p


def _logits(net, p: Problem) -> torch.Tensor:
    return net(p.x, p.edge_index, p.device_x, p.pair_x)


def imitate(net, problems: Sequence[Problem], steps: int, lr: float = 3e-3, seed: int = 0,
            say: Callable[[str], object] = lambda s: None) -> list[float]:
    """``steps`` Adam steps of the mean per-node cross-entropy towards each problem's
    teacher placement, one problem per step drawn at random; returns the losses."""
    usable = [p for p in problems if p.teacher is not None]
    if not usable or steps <= 0:
        return []
    rng = np.random.default_rng(seed)
    opt = torch.optim.Adam(net.parameters(), lr=lr)
    losses = []
    for step in range(steps):
        p = usable[int(rng.integers(len(usable)))]
        loss = torch.nn.functional.cross_entropy(_logits(net, p), torch.as_tensor(p.teacher))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
        if (step + 1) % max(1, steps // 5) == 0:
            say(f"  imitation {step + 1}/{steps}: loss {np.mean(losses[-20:]):.3f}")
    return losses


def _update(net, opt, p: Problem, samples: int, entropy: float, gen: torch.Generator) -> list[float]:
    """One REINFORCE step on ``p``: ``samples`` placements drawn, measured and learned
    from; returns the latencies of those measured (``[inf]`` when the budget took all)."""
    logits = _logits(net, p)
    dist = torch.distributions.Categorical(logits=logits)
    probs = dist.probs.detach()
    draws = torch.stack([torch.multinomial(probs, 1, generator=gen).squeeze(-1) for _ in range(samples)])
    lat = [p.latency(d.numpy()) for d in draws]
    kept = [k for k, s in enumerate(lat) if not np.isnan(s)]  # nan: past the run's budget
    if not kept:
        return [float("inf")]
    draws, lat = draws[kept], [lat[k] for k in kept]
    reward = torch.tensor([p.best_single_s / s if np.isfinite(s) else 0.0 for s in lat])
    adv = reward - reward.mean()
    if len(kept) > 1 and float(reward.std()) > 0:
        adv = adv / (reward.std() + 1e-8)
    logp = dist.log_prob(draws).mean(-1)  # per node: one scale on every graph size
    loss = -(adv * logp).mean() - entropy * dist.entropy().mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    return lat


def reinforce(net, problems: Sequence[Problem], steps: int, samples: int = 8, lr: float = 1e-3,
              entropy: float = 0.01, seed: int = 0, say: Callable[[str], object] = lambda s: None
              ) -> list[float]:
    """``steps`` REINFORCE steps, one problem drawn per step; returns each step's best
    sampled speedup over the problem's fastest single device."""
    if steps <= 0:
        return []
    rng = np.random.default_rng(seed)
    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.Adam(net.parameters(), lr=lr)
    history = []
    for step in range(steps):
        p = problems[int(rng.integers(len(problems)))]
        lat = _update(net, opt, p, samples, entropy, gen)
        history.append(p.best_single_s / min(lat))
        if (step + 1) % max(1, steps // 5) == 0:
            say(f"  reinforcement {step + 1}/{steps}: best sample {np.mean(history[-20:]):.3f}x "
                "the fastest single device")
    return history


@torch.no_grad()
def zero_shot(net, p: Problem) -> tuple[np.ndarray, float]:
    """The greedy placement of ``p`` and its latency (repaired, simulated)."""
    placement = _logits(net, p).argmax(-1).numpy()
    return placement, p.latency(placement)


def fastest_per_node(p: Problem) -> tuple[np.ndarray, float]:
    """The rule the pair features make easy to learn, as a baseline: every node on its
    own fastest device, repaired to the memory; the placement and its latency."""
    placement = np.nanargmin(np.where(np.isfinite(p.costs.compute_s), p.costs.compute_s, np.nan), 1)
    return placement, p.latency(placement)


def finetune(net, p: Problem, budget: int, samples: int = 8, lr: float = 1e-3, entropy: float = 0.01,
             seed: int = 0, greedy_first: bool = True, proposal_cap: int = 5) -> dict:
    """A run of ``budget`` measured placements on ``p`` from a copy of ``net`` (module
    docstring); the fastest single device is known before it starts, as every
    in-process run's reference. Returns ``latency_s`` (best measured), ``measured``,
    ``curve`` (best so far after each step) and ``first_s`` (the greedy placement's)."""
    torch.manual_seed(seed)
    net = copy.deepcopy(net)
    p.forget()
    p.limit = budget
    best, curve, first = p.best_single_s, [], float("nan")
    if greedy_first:
        _, first = zero_shot(net, p)
        best = min(best, first)
    opt = torch.optim.Adam(net.parameters(), lr=lr)
    gen = torch.Generator().manual_seed(seed)
    proposed = 0
    while p.measured() < budget and proposed < proposal_cap * budget:
        lat = _update(net, opt, p, samples, entropy, gen)
        proposed += samples
        best = min(best, min(lat))
        curve.append(best)
    out = {"latency_s": best, "measured": p.measured(), "proposed": proposed, "curve": curve,
           "first_s": first}
    p.forget()
    return out
