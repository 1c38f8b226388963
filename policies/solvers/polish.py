"""Moves under the simulator: how the CP-SAT solver improves its incumbent.

* :func:`polish`: from a placement, every node in index order is tried on every other
  device it can run on; a move is kept when the simulator's value of the objective
  drops (first improvement), and sweeps repeat until one improves nothing (a local
  optimum of single moves) or the deadline passes.
* :func:`anneal`: simulated annealing from a placement
  (:class:`policies.search.local.SimulatedAnnealing`: one node or a run of nodes moved,
  Metropolis acceptance on the log of the value, geometric cooling), in runs of at most
  ``chunk_s`` seconds and :data:`ANNEAL_STEPS` evaluations per node and device, each
  cooled over its evaluations and started from the best so far, until the deadline or
  :data:`ANNEAL_PATIENCE` runs in a row without a better placement. Where single moves
  are stuck on a plateau of equal makespans (DOPPLER's chain_mm), accepting a worse
  placement for a while is what reaches a better one.

Placements that break a memory limit or a co-location class are never kept. The value is
the simulator's own (for the ``parallel`` objective its first-come-first-served list
schedule, in DOPPLER's event order on DOPPLER's graphs), which a schedule model only
bounds.
"""
from __future__ import annotations

import time
from typing import Callable

import numpy as np

from envs.simulator import Simulator
from policies.search.local import SimulatedAnnealing

__all__ = ["polish", "anneal", "ANNEAL_CHUNK_S", "ANNEAL_STEPS", "ANNEAL_PATIENCE"]

ANNEAL_CHUNK_S = 15.0
"""The most seconds of one annealing run (its cooling schedule spans them)."""

ANNEAL_STEPS = 100
"""The most evaluations of one annealing run, per node and device (on chain_mm's 76 nodes
and 4 GPUs, about 15 s; on a graph of a few nodes, a fraction of a second)."""

ANNEAL_PATIENCE = 3
"""Annealing stops after this many runs in a row that find no better placement."""


def _value(sim: Simulator, objective: str) -> Callable[[np.ndarray], float]:
    g = sim.graph
    if bool(np.isfinite(g.mem_capacity).any()) or g.colocate is not None:
        def value(q: np.ndarray) -> float:
            r = sim.evaluate(q, objective)
            return r.value if r.feasible else np.inf
        return value
    return lambda q: getattr(sim, objective)(q).value


def polish(sim: Simulator, placement: np.ndarray, objective: str, deadline: float) -> tuple[np.ndarray, float, int]:
    """``(placement, value, moves kept)`` after single-node moves until a local optimum or
    ``deadline`` (a :func:`time.perf_counter` time)."""
    g = sim.graph
    p = np.asarray(placement, dtype=np.int64).copy()
    value = _value(sim, objective)
    best = value(p)
    runs = np.isfinite(g.compute_s)
    kept, improved = 0, True
    while improved and time.perf_counter() < deadline:
        improved = False
        for i in range(g.num_nodes):
            if time.perf_counter() >= deadline:
                break
            here = p[i]
            for d in np.flatnonzero(runs[i]).tolist():
                if d == here:
                    continue
                p[i] = d
                v = value(p)
                if v < best * (1 - 1e-12):
                    best, here, improved = v, d, True
                    kept += 1
                else:
                    p[i] = here
    return p, float(best), kept


def anneal(sim: Simulator, placement: np.ndarray, objective: str, deadline: float,
           chunk_s: float = ANNEAL_CHUNK_S, seed: int = 0) -> tuple[np.ndarray, float, int]:
    """``(placement, value, runs)``: the best placement of annealing runs from
    ``placement`` until ``deadline`` (module docstring), never worse than ``placement``."""
    g = sim.graph
    value = _value(sim, objective)
    best_p = np.asarray(placement, dtype=np.int64).copy()
    t = time.perf_counter()
    best = value(best_p)
    per = max(time.perf_counter() - t, 1e-6)          # one evaluation, to size the cooling
    runs = idle = 0
    while deadline - time.perf_counter() > min(1.0, chunk_s) and idle < ANNEAL_PATIENCE:
        end = min(deadline, time.perf_counter() + chunk_s)
        steps = max(1, min(int((end - time.perf_counter()) / per), ANNEAL_STEPS * g.num_nodes * g.num_devices))
        sa = SimulatedAnnealing(g.num_nodes, g.num_devices, budget=steps, seed=seed + runs, start=best_p)
        before = best
        while sa.step < steps and time.perf_counter() < end:
            p = sa.propose()
            v = value(p)
            sa.observe(p, v)
            if v < best:
                best, best_p = v, p.copy()
        runs += 1
        idle = idle + 1 if best >= before else 0
    return best_p, float(best), runs
