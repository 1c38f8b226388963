"""Single-node moves under the simulator: the incumbent polish of the CP-SAT solver.

From a placement, every node in index order is tried on every other device it can run on;
a move is kept when the simulator's value of the objective drops (first improvement), and
sweeps repeat until one improves nothing (a local optimum of single moves) or the deadline
passes. Placements that break a memory limit or a co-location class are never kept. The
value is the simulator's own (for the ``parallel`` objective its first-come-first-served
list schedule, in DOPPLER's event order on DOPPLER's graphs), which a schedule model only
bounds.
"""
from __future__ import annotations

import time

import numpy as np

from envs.simulator import Simulator

__all__ = ["polish"]


def polish(sim: Simulator, placement: np.ndarray, objective: str, deadline: float) -> tuple[np.ndarray, float, int]:
    """``(placement, value, moves kept)`` after single-node moves until a local optimum or
    ``deadline`` (a :func:`time.perf_counter` time)."""
    g = sim.graph
    p = np.asarray(placement, dtype=np.int64).copy()
    limited = bool(np.isfinite(g.mem_capacity).any()) or g.colocate is not None

    def value(q: np.ndarray) -> float:
        if limited:
            r = sim.evaluate(q, objective)
            return r.value if r.feasible else np.inf
        return getattr(sim, objective)(q).value

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
