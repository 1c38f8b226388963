"""Search without learning, at the same measurement budget as the learned methods.

A learned placer is only worth its complexity where it beats these with the
same number of measured placements. Both work on the run's (coarsened) graph,
one device per node, and see only measured latencies (a placement that fails
counts as the environment's failure latency, graded by how far it is over a
memory limit, see :meth:`envs.placement_env.PlacementEnv.reward_latency`), so
they get exactly the information the learned methods get from their rewards.

* :class:`RandomSearch`: every node on a device drawn uniformly; the best
  measured placement wins.
* :class:`SimulatedAnnealing`: a local search from the fastest single device:
  each step changes one node's device or moves a contiguous run of nodes (in
  topological order, 2-8 nodes) to one device, and accepts the new placement
  with the Metropolis rule on the log of the latency, at a temperature that
  falls geometrically from ``t_start`` to ``t_end`` over the budget (Kirkpatrick
  et al., Science 1983).

Both propose one placement at a time (:meth:`propose`) and are told its
latency (:meth:`observe`); their whole state is a JSON-able dict, so a run
checkpoints and resumes them.
"""
from __future__ import annotations

import math
from typing import Any, Optional

import numpy as np

__all__ = ["RandomSearch", "SimulatedAnnealing", "SEARCHES"]


class RandomSearch:
    """Uniform random placements."""

    def __init__(self, num_nodes: int, num_devices: int, budget: int, seed: int = 0,
                 start: Optional[np.ndarray] = None) -> None:
        self.n, self.d = num_nodes, num_devices
        self.rng = np.random.default_rng(seed)

    def propose(self) -> np.ndarray:
        return self.rng.integers(0, self.d, self.n)

    def observe(self, placement: np.ndarray, latency_s: float) -> None:
        pass

    def state_dict(self) -> dict[str, Any]:
        return {"rng": self.rng.bit_generator.state}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.rng.bit_generator.state = state["rng"]


class SimulatedAnnealing:
    """Local search with Metropolis acceptance on log-latency (see the module docstring).

    Args:
        num_nodes / num_devices: the problem's size.
        budget: placements the search may propose (sets the cooling schedule).
        seed: random seed.
        start: the initial placement (default: all on device 0).
        t_start / t_end: temperature at the first and the last step, on the scale
            of ``log(latency)`` differences (0.05: a placement 5 % slower is
            accepted with probability 1/e at the start).
        block_share: share of moves that move a run of nodes instead of one node.
    """

    def __init__(self, num_nodes: int, num_devices: int, budget: int, seed: int = 0,
                 start: Optional[np.ndarray] = None, t_start: float = 0.05, t_end: float = 5e-4,
                 block_share: float = 0.3) -> None:
        self.n, self.d = num_nodes, num_devices
        self.rng = np.random.default_rng(seed)
        self.current = (np.zeros(num_nodes, dtype=np.int64) if start is None
                        else np.asarray(start, dtype=np.int64).copy())
        self.current_cost: Optional[float] = None
        self.step, self.budget = 0, max(1, budget)
        self.t_start, self.t_end, self.block_share = t_start, t_end, block_share
        self._pending: Optional[np.ndarray] = None

    def temperature(self) -> float:
        frac = min(self.step / self.budget, 1.0)
        return self.t_start * (self.t_end / self.t_start) ** frac

    def propose(self) -> np.ndarray:
        if self.current_cost is None:  # measure the start first
            self._pending = self.current.copy()
            return self._pending
        p = self.current.copy()
        if self.rng.random() < self.block_share and self.n > 2:
            length = int(self.rng.integers(2, min(8, self.n) + 1))
            first = int(self.rng.integers(0, self.n - length + 1))
            p[first:first + length] = self.rng.integers(0, self.d)
        else:
            i = int(self.rng.integers(0, self.n))
            p[i] = (p[i] + self.rng.integers(1, self.d)) % self.d if self.d > 1 else p[i]
        self._pending = p
        return p

    def observe(self, placement: np.ndarray, latency_s: float) -> None:
        cost = math.log(max(latency_s, 1e-12))
        self.step += 1
        if self.current_cost is None:
            self.current, self.current_cost = np.asarray(placement).copy(), cost
            return
        delta = cost - self.current_cost
        if delta <= 0 or self.rng.random() < math.exp(-delta / max(self.temperature(), 1e-12)):
            self.current, self.current_cost = np.asarray(placement).copy(), cost

    def state_dict(self) -> dict[str, Any]:
        return {"rng": self.rng.bit_generator.state, "current": self.current.tolist(),
                "current_cost": self.current_cost, "step": self.step}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.rng.bit_generator.state = state["rng"]
        self.current = np.asarray(state["current"], dtype=np.int64)
        self.current_cost, self.step = state["current_cost"], int(state["step"])


#: registry name -> class
SEARCHES = {"random": RandomSearch, "anneal": SimulatedAnnealing}
