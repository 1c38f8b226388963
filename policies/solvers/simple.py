"""Trivial baselines: every node on one device, and seeded random placements.

Both return simulator values and the cheap bound of :mod:`policies.solvers.bounds`.
"""
from __future__ import annotations

import time
from typing import Optional

import numpy as np

from envs.simulator import Simulator
from hsdag_core.costgraph import CostGraph
from policies.solvers.bounds import lower_bound
from policies.solvers.result import SolveResult, colocation_groups, finish

__all__ = ["solve_single", "solve_random"]


def solve_single(graph: CostGraph, objective: str, *, device: Optional[str] = None,
                 time_limit: Optional[float] = None) -> SolveResult:
    """All nodes on ``device``, or on the best single device when None.

    ``info["per_device_s"]`` gives every device's value (``None`` when that
    device cannot run or hold the whole graph).
    """
    t0 = time.perf_counter()
    sim = Simulator(graph)
    per: dict[str, float | None] = {}
    best, best_v = None, np.inf
    devices = [graph.device_index(device)] if device is not None else range(graph.num_devices)
    for d in devices:
        p = graph.single_device(d)
        if np.isinf(graph.compute_s[:, d]).any():
            per[graph.devices[d]] = None
            continue
        r = sim.evaluate(p, objective)
        per[graph.devices[d]] = r.value if r.feasible else None
        if r.feasible and r.value < best_v:
            best, best_v = d, r.value
    name = "single" if device is None else f"single:{device}"
    if best is None:
        if device is not None:
            return finish(graph, objective, name, graph.single_device(devices[0]), t0,
                          bound=lower_bound(graph, objective), info={"per_device_s": per},
                          status=f"{device} cannot run or hold the whole graph")
        return finish(graph, objective, name, None, t0, bound=lower_bound(graph, objective),
                      status="no single device can run and hold the whole graph",
                      info={"per_device_s": per})
    return finish(graph, objective, name, graph.single_device(best), t0,
                  bound=lower_bound(graph, objective),
                  status=f"everything on {graph.devices[best]}", info={"per_device_s": per})


def solve_random(graph: CostGraph, objective: str, *, samples: int = 100, seed: int = 0,
                 time_limit: Optional[float] = None) -> SolveResult:
    """Best of ``samples`` seeded random placements.

    Each co-location class draws one device uniformly among those that can run
    all of it; memory is not looked at when drawing, so a draw may be
    infeasible, and the best *feasible* draw is returned (the best overall when
    none fits).
    """
    t0 = time.perf_counter()
    if samples < 1:
        raise ValueError("random needs at least one sample")
    rng = np.random.default_rng(seed)
    grp = colocation_groups(graph)
    G = int(grp.max()) + 1
    ok = np.zeros((G, graph.num_devices))
    np.add.at(ok, grp, graph.compute_s)
    allowed = np.isfinite(ok)
    if not allowed.any(axis=1).all():
        return finish(graph, objective, "random", None, t0, bound=lower_bound(graph, objective),
                      status="some co-location class runs on no device")
    sim = Simulator(graph)
    best, best_key = None, (True, np.inf)
    drawn = 0
    for _ in range(samples):
        if time_limit is not None and time.perf_counter() - t0 > time_limit:
            break
        u = rng.random((G, graph.num_devices)) * allowed
        p = u.argmax(axis=1)[grp]
        r = sim.evaluate(p, objective)
        drawn += 1
        key = (not r.feasible, r.value)
        if key < best_key:
            best, best_key = p, key
    return finish(graph, objective, "random", best, t0, bound=lower_bound(graph, objective),
                  status=f"best of {drawn} random placement(s), seed {seed}",
                  info={"samples": drawn, "seed": seed})
