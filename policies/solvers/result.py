"""What every exact or algorithmic placement method returns, and helpers they share.

A method solves ``min_p f(p)`` for one simulator objective ``f``
(:mod:`envs.simulator`) over placements ``p`` (a device index per node) that
respect device support, memory and co-location. It returns a
:class:`SolveResult` whose ``value`` is always ``Simulator.evaluate(p, f).value``
(never the method's own model of it) and whose ``bound`` is a proven lower
bound on ``min f`` over the method's search space (``scope``).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Optional

import numpy as np

from envs.simulator import Simulator
from hsdag_core.costgraph import CostGraph

__all__ = ["SolveResult", "finish", "colocation_groups", "device_classes", "uniform_transfer",
           "redundant_for_sequential", "rel_gap", "TOL"]

TOL = 1e-9
"""Relative tolerance under which a value counts as equal to its bound."""


def rel_gap(value: float, bound: float) -> float:
    """``(value - bound) / value`` (0 when both are 0, inf without a bound or value)."""
    if not np.isfinite(value) or not np.isfinite(bound):
        return float("inf")
    if value <= 0:
        return 0.0
    return max(0.0, (value - bound) / value)


@dataclass
class SolveResult:
    """One method's answer for one graph and objective.

    Attributes:
        placement: ``[n]`` device index per node.
        value: simulator value of ``placement`` (seconds); ``inf`` when the
            method found no placement.
        feasible: the placement respects memory, support and co-location.
        bound: proven lower bound on the optimum over ``scope`` (``-inf``
            when the method proves none).
        gap: ``(value - bound) / value``.
        optimal: ``value`` is proven optimal over ``scope`` (gap within
            :data:`TOL`, or the solver's own optimality proof).
        solve_s: wall-clock time of the solve, seconds.
        method, objective: what was run.
        status: one sentence (solver status, time limit hit, why infeasible).
        scope: ``"all"`` (every placement) or ``"contiguous"`` (the splits the
            throughput DP and ``milp-contig`` search).
        info: extra figures (ideals, MIP nodes, per-device values...).
    """

    placement: np.ndarray
    value: float
    feasible: bool
    bound: float
    gap: float
    optimal: bool
    solve_s: float
    method: str
    objective: str
    status: str
    scope: str = "all"
    info: dict[str, Any] = field(default_factory=dict)

    def to_dict(self, graph: Optional[CostGraph] = None) -> dict[str, Any]:
        """JSON-ready dict; with ``graph`` the placement is keyed by node name."""
        out: dict[str, Any] = {
            "method": self.method, "objective": self.objective, "value_s": self.value,
            "feasible": self.feasible, "bound_s": self.bound, "gap": self.gap,
            "optimal": self.optimal, "solve_s": self.solve_s, "status": self.status,
            "scope": self.scope, "info": self.info}
        if graph is not None:
            out["graph"] = graph.name
            out["placement"] = graph.placement_to_names(self.placement)
        else:
            out["placement"] = [int(x) for x in self.placement]
        return {k: (None if isinstance(v, float) and not np.isfinite(v) else v)
                for k, v in out.items()}


def finish(graph: CostGraph, objective: str, method: str, placement: Optional[np.ndarray],
           t0: float, *, bound: float = -np.inf, proven: bool = False, status: str = "",
           scope: str = "all", info: Optional[dict[str, Any]] = None) -> SolveResult:
    """Evaluate ``placement`` with the simulator and package the result.

    ``proven`` marks a solver's own optimality proof (e.g. HiGHS status
    optimal); otherwise optimality is ``value <= bound`` within :data:`TOL`.
    """
    solve_s = time.perf_counter() - t0
    if placement is None:
        return SolveResult(np.zeros(graph.num_nodes, dtype=np.int64), float("inf"), False,
                           bound, float("inf"), False, solve_s, method, objective,
                           status or "no placement found", scope, info or {})
    p = np.asarray(placement, dtype=np.int64)
    sim = Simulator(graph)
    if np.isinf(graph.compute_s[np.arange(graph.num_nodes), p]).any():
        # a node on a device that cannot run it: no objective is finite
        value, feasible, violation = float("inf"), False, sim.check(p)
    else:
        res = sim.evaluate(p, objective)
        value, feasible, violation = float(res.value), res.feasible, res.violation
    gap = rel_gap(value, bound)
    optimal = feasible and (proven or gap <= 1e-7 or value <= bound + TOL)
    if not feasible:
        status = f"{status}; placement infeasible: {violation}" if status else \
            f"placement infeasible: {violation}"
    return SolveResult(p, value, feasible, float(bound), gap, optimal, solve_s, method,
                       objective, status or ("optimal" if optimal else "feasible"), scope,
                       info or {})


def colocation_groups(graph: CostGraph) -> np.ndarray:
    """``[n]`` group id per node: nodes of one co-location class share a group,
    every other node is its own group. Ids are ``0..G-1`` in order of first node."""
    n = graph.num_nodes
    if graph.colocate is None:
        return np.arange(n, dtype=np.int64)
    key = np.where(graph.colocate >= 0, graph.colocate, -1 - np.arange(n))
    _, first, inv = np.unique(key, return_index=True, return_inverse=True)
    rank = np.empty(first.size, dtype=np.int64)
    rank[np.argsort(first, kind="stable")] = np.arange(first.size)
    return rank[inv]


def uniform_transfer(graph: CostGraph) -> Optional[np.ndarray]:
    """``[T]`` per-tensor transfer time when it does not depend on the pair of
    devices (always true for the dnn-partitioning format), else None."""
    if graph.tensor_transfer_s is not None:
        return graph.tensor_transfer_s
    D = graph.num_devices
    if D == 1:
        return np.zeros(graph.num_tensors)
    tr = graph.transfer_s()
    off = ~np.eye(D, dtype=bool)
    vals = tr[:, off]
    if np.allclose(vals, vals[:, :1], rtol=1e-12, atol=0.0):
        return vals[:, 0].copy()
    return None


def device_classes(graph: CostGraph) -> list[list[int]]:
    """Devices grouped into classes of interchangeable devices (same compute, same memory)."""
    classes: list[list[int]] = []
    for d in range(graph.num_devices):
        for cls in classes:
            r = cls[0]
            if np.array_equal(graph.compute_s[:, d], graph.compute_s[:, r]) and \
                    graph.mem_capacity[d] == graph.mem_capacity[r]:
                cls.append(d)
                break
        else:
            classes.append([d])
    return classes


def redundant_for_sequential(graph: CostGraph) -> list[int]:
    """Devices the sequential objective never needs.

    Among interchangeable devices (one class of :func:`device_classes`, with
    transfer times that do not depend on the pair of devices) of unlimited
    memory, moving every node of the others onto the first changes no compute
    time and can only remove transfers and stage boundaries; so all but the
    first can stay empty at no loss.
    """
    if graph.num_devices < 2 or uniform_transfer(graph) is None:
        return []
    return [d for cls in device_classes(graph) for d in cls[1:]
            if np.isinf(graph.mem_capacity[d])]
