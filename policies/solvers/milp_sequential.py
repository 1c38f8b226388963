"""The sequential objective's mixed-integer program (HiGHS), on the rows of
:mod:`policies.solvers.milp`::

    min sum c[i,d] x[i,d] + transfers + beta sum_i sum_d b[i,d],
    b[i, d] >= x[i, d] - x[i+1, d]             (sum_d b[i, d] = [p_i != p_{i+1}])

Transfers: where a tensor's transfer time is the same between every pair of devices,
``tr[t] sum_d y[t, d]`` (the receipts of :mod:`policies.solvers.milp`). Where it depends on
the pair, each edge ``u -> v`` of tensor ``t`` has the joint placement of its two ends,
``z[e, a, b] >= 0`` with ``sum_b z[e, a, b] = x[u, a]`` and ``sum_a z[e, a, b] = x[v, b]``
(the local polytope of a pairwise labelling problem), and the tensor is sent from ``a``
to ``b`` at least as often as any of its consumers' edges say::

    w[t, a, b] >= z[e, a, b]     for every edge e of t,  a != b,  cost tr[t, a, b]

(a tensor of one consumer costs its edge's ``z`` directly). At integers ``z`` is the
product ``x[u, a] x[v, b]`` and ``w`` the indicator of "sent from ``a`` to ``b``"; in
the relaxation the marginal rows tie the sent amounts to both ends, where the lower
bounds ``w >= x[u, a] + y[t, b] - 1`` of the throughput MILP do not, so its bound is
much closer to the optimum and the branch and bound ends sooner.

Its bound is at least :func:`policies.solvers.path_bound.sequential_bound` (the transfers a
split of a path into memory-sized segments must pay) and the set partitioning bound of
:func:`policies.solvers.partition_bound.partition_bound` (column generation over the node
sets one device can hold, computed while HiGHS's branch and bound runs in another thread),
given ``PATH_BOUND_FROM_S`` seconds; the branch and bound's own relaxation spreads each node over identical
accelerators so that no tensor crosses, and those two bounds are what a long solve proves
on chains of large tensors. The restricted master heuristic over the column generation's
sets (:mod:`policies.solvers.master_heuristic`) looks for placements in the same thread;
the solve returns its best where HiGHS finds none better.
Interchangeable devices of unlimited memory (e.g. the benchmark's CPU cores)
are all but one left empty, which loses nothing for this objective
(:func:`policies.solvers.result.redundant_for_sequential`).
Interchangeable devices with a memory limit (the benchmark's accelerators) are used in
the order of their first node (:func:`_order_identical`), so the branch and bound does
not explore relabellings of one placement; the MIP start is relabelled to match.
"""
from __future__ import annotations

import time
from typing import Optional, Sequence

import numpy as np

from envs.simulator import Simulator
from hsdag_core.costgraph import CostGraph
from policies.solvers.bounds import lower_bound
from policies.solvers.partition_bound import STOP_GAP, partition_bound
from policies.solvers.path_bound import PATH_BOUND_FROM_S, sequential_bound
from policies.solvers.highs_model import Model
from policies.solvers.milp import _placement_vars, _receipt, _solve_from
from policies.solvers.rounding import round_relaxation
from policies.solvers.result import (SolveResult, device_classes, finish, redundant_for_sequential,
                                    uniform_transfer)

__all__ = ["solve_milp_sequential", "sequential_start", "PATH_BOUND_FROM_S"]

ORDER_IDENTICAL = True
"""Add :func:`_order_identical`'s rows to the sequential MILP (symmetry breaking)."""

LP_ROUND_SHARE = 0.4
"""Share of a short solve's time (under ``PATH_BOUND_FROM_S`` seconds, with a memory limit)
the rounding of its LP relaxation into a MIP start may take (:func:`_lp_rounded`); the
branch and bound gets what is left. The relaxation is close to the optimum, and a short
branch and bound often ends before its own heuristics improve on the start it was given."""

LP_ROUND_SHARE_SUBSECOND = 0.9
"""The rounding's share of a solve given under ``SUBSECOND_S`` seconds (refit's proposals):
in that time HiGHS's branch and bound rarely gets past its root to improve on its start,
so the rounding's own single-node moves are where the time is best spent; on a small
graph the moves end early and the branch and bound gets the rest. Given a few seconds on
a graph of hundreds of nodes and many devices the branch and bound does better than the
moves, hence :data:`LP_ROUND_SHARE` there."""

SUBSECOND_S = 1.5
"""Solves given under this many seconds round with :data:`LP_ROUND_SHARE_SUBSECOND`."""

START_MAX_S = 5.0
"""The most seconds the heuristics of a start take (:func:`sequential_start`): on the eight
latency inputs 5 s and 15 s give the same start, and in a long solve the rest of the time
goes to the bounds and the branch and bound."""

PARTITION_MAX_S = 600.0
"""The set partitioning bound's time in a solve without a time limit (it runs beside
HiGHS's branch and bound, :func:`solve_milp_sequential`, and stops sooner once it proves
the start or converges, or HiGHS ends)."""

PARTITION_MARGIN_S = 0.2
"""The set partitioning bound ends this long before the solve's time limit."""



def _pair_transfers(m: Model, g: CostGraph, x: np.ndarray) -> None:
    """The transfers of a pair-dependent link: the joint placements ``z`` of every edge's
    ends and the sent indicators ``w`` of tensors of several consumers (module docstring)."""
    D = g.num_devices
    tr = g.transfer_s()
    off = ~np.eye(D, dtype=bool)
    costly = tr.reshape(g.num_tensors, -1).max(axis=1) > 0
    edges = np.flatnonzero(costly[g.edge_tensor])  # edges whose tensor costs a transfer
    tensor = g.edge_tensor[edges]
    consumers = np.bincount(tensor, minlength=g.num_tensors)
    one = consumers[tensor] == 1
    z = m.var((edges.size, D, D), cost=np.where(one[:, None, None] & off, tr[tensor], 0.0))
    for a in range(D):
        m.rows(np.concatenate([z[:, a, :], x[g.edge_src[edges], a][:, None]], axis=1),
               [1.0] * D + [-1.0], 0.0, 0.0)
        m.rows(np.concatenate([z[:, :, a], x[g.edge_dst[edges], a][:, None]], axis=1),
               [1.0] * D + [-1.0], 0.0, 0.0)
    many = np.flatnonzero(consumers > 1)
    if many.size == 0:
        return
    w = m.var((many.size, D, D), cost=np.where(off, tr[many], 0.0), ub=np.where(off, 1.0, 0.0))
    slot = np.full(g.num_tensors, -1)
    slot[many] = np.arange(many.size)
    shared = np.flatnonzero(~one)
    for a, b in zip(*np.nonzero(off)):
        m.rows(np.stack([w[slot[tensor[shared]], a, b], z[shared, a, b]], axis=1),
               [1.0, -1.0], lb=0.0)


def _order_identical(m: Model, g: CostGraph, x: np.ndarray, unused: Sequence[int]) -> None:
    """Symmetry breaking among interchangeable devices (one class of
    :func:`policies.solvers.result.device_classes`, transfers independent of the pair):
    device ``k`` of a class holds node ``i`` only if device ``k - 1`` holds a node before
    ``i``, so the class's devices are used in the order of their first node. Relabelling
    such devices changes no objective, so one optimum always satisfies it."""
    if uniform_transfer(g) is None:
        return
    n = g.num_nodes
    for cls in device_classes(g):
        cls = [d for d in cls if d not in unused]
        if len(cls) < 2:
            continue
        K = len(cls)
        s = m.var((n, K), ub=1.0)   # s[i, k] = nodes 0..i on device cls[k] (at most 1 needed)
        m.rows(np.stack([s[0], x[0, cls]], axis=1), [1.0, -1.0], ub=0.0)
        for k, d in enumerate(cls):
            m.rows(np.stack([s[1:, k], s[:-1, k], x[1:, d]], axis=1), [1.0, -1.0, -1.0], ub=0.0)
            if k:
                m.rows(np.stack([x[0:1, d], ], axis=1), [1.0], ub=0.0)
                m.rows(np.stack([x[1:, d], s[:-1, k - 1]], axis=1), [1.0, -1.0], ub=0.0)


def sequential_start(graph: CostGraph, time_limit: Optional[float] = None) -> Optional[np.ndarray]:
    """The best placement of the heuristics, by simulator value: alpha-expansion (within
    ``time_limit``), the segments of a topological order (:mod:`policies.solvers.segments`,
    refined by single-node moves in what is left of ``time_limit``), Baechi's m-TOPO and m-ETF, and the
    best single device; None when none fits."""
    from policies.solvers.baechi import solve_m_etf, solve_m_topo
    from policies.solvers.mincut import solve_alpha_expansion
    from policies.solvers.segments import solve_segments
    from policies.solvers.simple import solve_single

    best = None
    t0 = time.perf_counter()
    cands = [solve_alpha_expansion(graph, "sequential", time_limit=time_limit)]
    left = None if time_limit is None else max(0.0, time_limit - (time.perf_counter() - t0))
    cands += [solve_segments(graph, "sequential", time_limit=left, path_bound=False),
              solve_m_topo(graph, "sequential"), solve_m_etf(graph, "sequential")]
    cands.append(solve_single(graph, "sequential"))
    for r in cands:
        if r.feasible and (best is None or r.value < best.value):
            best = r
    return None if best is None else best.placement


def _lp_rounded(m: Model, g: CostGraph, x: np.ndarray, time_limit: float, info: dict
                ) -> Optional[tuple[np.ndarray, float]]:
    """The LP relaxation's best rounding within the limits and its sequential latency
    (:func:`policies.solvers.rounding.round_relaxation`, in what is left of ``time_limit``
    seconds); None when the LP is not solved in time or no rounding fits. ``info`` gets
    ``lp_s``, the seconds the relaxation took (``inf`` when it was not solved in time), what
    a caller needs to know to give a later solve time enough to round."""
    t0 = time.perf_counter()
    cols = m.relaxation(time_limit, lower_bound(g, "sequential"))
    info["lp_s"] = time.perf_counter() - t0 if cols is not None else np.inf
    if cols is None:
        return None
    return round_relaxation(g, cols[x.ravel()].reshape(x.shape), t0 + time_limit)


def _canonical(g: CostGraph, p: np.ndarray, unused: Sequence[int]) -> np.ndarray:
    """``p`` with each class of interchangeable devices relabelled in the order of their
    first node (:func:`_order_identical`), so it satisfies the ordering rows."""
    if not ORDER_IDENTICAL or uniform_transfer(g) is None:
        return p
    q = p.copy()
    for cls in device_classes(g):
        cls = [d for d in cls if d not in unused]
        used = sorted((d for d in cls if (p == d).any()), key=lambda d: int(np.argmax(p == d)))
        for new, old in zip(cls, used + [d for d in cls if d not in used]):
            q[p == old] = new
    return q


def _merge_redundant(graph: CostGraph, p: np.ndarray, unused: Sequence[int]) -> np.ndarray:
    """``p`` with the nodes of each device of ``unused`` moved to the first device of its
    class (:func:`policies.solvers.result.redundant_for_sequential`: never worse)."""
    q = np.asarray(p, dtype=np.int64).copy()
    for cls in device_classes(graph):
        for d in cls[1:]:
            if d in unused:
                q[q == d] = cls[0]
    return q


def solve_milp_sequential(graph: CostGraph, objective: str = "sequential", *,
                          time_limit: Optional[float] = 60.0, rel_gap: float = 1e-7,
                          start: Optional[np.ndarray] = None, start_share: float = 0.25,
                          threads: Optional[int] = None) -> SolveResult:
    """Exact sequential optimum with memory, support and co-location (module docstring).

    Args:
        start: the MIP start, a placement (the incumbent); None: the best of the
            heuristics (:func:`sequential_start`, given ``start_share`` of ``time_limit``,
            at most ``START_MAX_S``).
            A short solve with a memory limit starts from its rounded LP relaxation
            instead when that is faster (:data:`LP_ROUND_SHARE`).
            The result is never worse than the start: HiGHS begins from it, and should
            its own placement measure worse on the simulator the start is returned.
        threads: HiGHS's threads (None: its default).
    """
    t0 = time.perf_counter()
    if objective != "sequential":
        raise ValueError(f"solve_milp_sequential solves the sequential objective, not {objective!r}")
    g = graph
    if start is None:
        start = sequential_start(g, None if time_limit is None else
                                 min(start_share * time_limit, START_MAX_S))
    m = Model()
    unused = redundant_for_sequential(g)
    x = _placement_vars(m, g, unused)
    m.cost[0] = np.where(np.isinf(g.compute_s), 0.0, g.compute_s).ravel()
    uni = uniform_transfer(g)
    if uni is not None:
        _receipt(m, g, x)
        m.cost[-1] = np.repeat(uni, g.num_devices)
    else:
        _pair_transfers(m, g, x)
    if g.boundary_s > 0 and g.num_nodes > 1:
        b = m.var((g.num_nodes - 1, g.num_devices), cost=g.boundary_s)
        for d in range(g.num_devices):
            m.rows(np.stack([b[:, d], x[:-1, d], x[1:, d]], axis=1), [1.0, -1.0, 1.0], lb=0.0)
    info: dict = {"devices_left_empty": len(unused)}
    if ORDER_IDENTICAL:
        _order_identical(m, g, x, unused)
    long = time_limit is None or time_limit >= PATH_BOUND_FROM_S
    limited = bool(np.isfinite(g.mem_capacity).any())
    rounded = None if long or not limited else _lp_rounded(
        m, g, x, time_limit * (LP_ROUND_SHARE_SUBSECOND if time_limit < SUBSECOND_S else LP_ROUND_SHARE), info)
    if rounded is not None:
        info["lp_rounded_s"] = float(rounded[1])
        sim = Simulator(g)
        if (start is None or sim.check(start) is not None
                or rounded[1] < sim.evaluate(start, objective).value):
            start = rounded[0]
    if start is not None:
        start = _canonical(g, _merge_redundant(g, start, unused), unused)
    floor, beside, better = -np.inf, None, []
    if long and limited:
        floor = info["path_bound_s"] = max(lower_bound(g, objective), sequential_bound(g))
        sim = Simulator(g)
        value = np.inf if start is None or sim.check(start) is not None else \
            sim.evaluate(start, objective).value
        if value > floor * (1 + rel_gap):
            def beside(cancel, done) -> float:
                """The set partitioning bound while HiGHS solves, with the restricted
                master heuristic's placements; it stops HiGHS once it proves the best."""
                left = PARTITION_MAX_S if time_limit is None else \
                    time_limit - (time.perf_counter() - t0) - PARTITION_MARGIN_S
                bound, part = partition_bound(g, max(left, 0.0), start, stop_at=value, stop=done,
                                              better=lambda p, v: better.append((v, p)))
                info.update(part)
                if bound >= (better[-1][0] if better else value) * (1 - STOP_GAP):
                    info["partition_proves_incumbent"] = True
                    cancel()
                return bound
    out = _solve_from(m, g, objective, x, start, t0, time_limit, rel_gap, threads, info,
                      floor=floor, beside=beside)
    if better and better[-1][0] < out.value:
        out = finish(g, objective, out.method, better[-1][1], t0, bound=out.bound, info=out.info,
                     status="the restricted master heuristic's placement: HiGHS found none better")
    if info.get("partition_proves_incumbent") and out.bound >= out.value * (1 - STOP_GAP):
        out.status = (f"within {STOP_GAP:.0e} of the set partitioning bound "
                      "(HiGHS stopped)")
    return out
