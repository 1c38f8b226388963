"""Mixed-integer programs (HiGHS, :mod:`policies.solvers.highs_model`): their shared rows, and
the throughput and parallel objectives.

Common variables: ``x[i, d] in {0, 1}`` (node ``i`` on device ``d``; fixed to 0
where ``compute_s[i, d] = inf``) with ``sum_d x[i, d] = 1``, memory rows
``sum_i mem_i x[i, d] <= cap_d``, co-location rows ``x[i, d] = x[j, d]``, and
the *receipt* of tensor ``t`` (producer ``u``) on device ``d``::

    y[t, d] >= x[v, d] - x[u, d]      for every consumer v of t,   0 <= y <= 1

which at an optimum is ``[t is sent to d]`` (once per tensor and destination,
as the simulator counts). When a transfer time depends on the pair of
devices, ``w[t, a, d] >= x[u, a] + y[t, d] - 1`` is the indicator of "sent
from ``a`` to ``d``". Every such variable only appears with non-negative cost,
so relaxing the indicators to lower bounds is exact.

``sequential``: :mod:`policies.solvers.milp_sequential` (from the rows here, with the
transfers of a pair-dependent link in their own, tighter form).

``throughput`` (:func:`solve_milp_throughput`)::

    min z,  z >= sum_i c[i,a] x[i,a] + sum_{t,d} tr[t,a,d] w[t,a,d]     (sent by a)
                                     + sum_{t,b} tr[t,b,a] w[t,b,a]     (received by a)

which is the simulator's model exactly (a sender pays once per destination).
``contiguous=True`` adds a total order of the devices, ``o[a, b] in {0,1}``,
``o[a,b] + o[b,a] = 1``, ``o[a,b] + o[b,c] + o[c,a] <= 2``, and
``x[g, a] + x[h, b] - 1 <= o[a, b]`` for every edge ``g -> h`` of the
precedence DAG of :func:`policies.solvers.ideals.contiguity` (same search space as the
DP; identical devices are pre-ordered to break symmetry).

``parallel`` (:func:`solve_milp_parallel`, small graphs): start times ``S_i``,
``S_v >= S_u + dur_u + sum tr w`` on every edge, and for every pair of nodes
not ordered by a path a binary ``q`` with big-M disjunctions when they share a
device. Its optimum is the best *schedule*; the simulator runs a fixed
first-come-first-served schedule, which the MILP can always reproduce, so the
MILP's dual bound is a valid lower bound on the simulator's optimum while its
placement's simulator value may exceed the MILP's makespan.
"""
from __future__ import annotations

import itertools
import time
from typing import Callable, Optional, Sequence

import networkx as nx
import numpy as np

from envs.simulator import Simulator
from hsdag_core.costgraph import CostGraph
from policies.solvers.bounds import lower_bound
from policies.solvers.highs_model import Model
from policies.solvers.ideals import contiguity
from policies.solvers.result import (SolveResult, colocation_groups, device_classes, finish,
                                    uniform_transfer)

__all__ = ["solve_milp_throughput", "solve_milp_parallel", "PARALLEL_MAX_NODES"]

PARALLEL_MAX_NODES = 40
"""Largest graph the disjunctive parallel MILP accepts."""

def _placement_vars(m: Model, graph: CostGraph, unused: Sequence[int] = ()) -> np.ndarray:
    """``x`` with assignment, support, memory and co-location rows; devices
    ``unused`` are left empty."""
    n, D = graph.num_nodes, graph.num_devices
    ub = np.where(np.isinf(graph.compute_s), 0.0, 1.0)
    ub[:, list(unused)] = 0.0
    x = m.var((n, D), ub=ub, integer=True)
    m.rows(x, 1.0, 1.0, 1.0)
    for d in range(D):
        if np.isfinite(graph.mem_capacity[d]) and graph.mem_bytes.sum() > graph.mem_capacity[d]:
            # in units of the capacity: HiGHS's tolerances are absolute
            m.rows(x[:, d][None, :], graph.mem_bytes[None, :] / graph.mem_capacity[d], ub=1.0)
    grp = colocation_groups(graph)
    order = np.argsort(grp, kind="stable")
    same = np.flatnonzero(grp[order][1:] == grp[order][:-1])
    for d in range(D):
        m.rows(np.stack([x[order[same], d], x[order[same + 1], d]], axis=1), [1.0, -1.0], 0.0, 0.0)
    return x


def _receipt(m: Model, graph: CostGraph, x: np.ndarray) -> np.ndarray:
    """``y[t, d] >= x[v, d] - x[u, d]`` for every edge."""
    y = m.var((graph.num_tensors, graph.num_devices), ub=1.0)
    u = graph.edge_src
    for d in range(graph.num_devices):
        m.rows(np.stack([y[graph.edge_tensor, d], x[graph.edge_dst, d], x[u, d]], axis=1),
               [1.0, -1.0, 1.0], lb=0.0)
    return y


def _pairs(D: int) -> list[tuple[int, int]]:
    return [(a, b) for a in range(D) for b in range(D) if a != b]


def _sent(m: Model, graph: CostGraph, x: np.ndarray, y: np.ndarray,
          tr: np.ndarray) -> tuple[np.ndarray, np.ndarray, list[tuple[int, int]]]:
    """``w[t, k] >= x[u, a] + y[t, b] - 1`` for the pairs ``k = (a, b)`` and tensors with cost."""
    pairs = _pairs(graph.num_devices)
    ts = np.flatnonzero(np.isin(np.arange(graph.num_tensors), graph.edge_tensor)
                        & (tr.reshape(graph.num_tensors, -1).max(axis=1) > 0))
    w = m.var((ts.size, len(pairs)))
    u = graph.tensor_src[ts]
    for k, (a, b) in enumerate(pairs):
        m.rows(np.stack([w[:, k], x[u, a], y[ts, b]], axis=1), [1.0, -1.0, -1.0], lb=-1.0)
    # their sum over senders (implied for integers, tighter for the LP relaxation):
    # sum_a w[t, (a, b)] >= y[t, b] - x[u, b]
    for b in range(graph.num_devices):
        ks = [k for k, (_, r) in enumerate(pairs) if r == b]
        m.rows(np.concatenate([w[:, ks], np.stack([y[ts, b], x[u, b]], axis=1)], axis=1),
               [1.0] * len(ks) + [-1.0, 1.0], lb=0.0)
    return w, ts, pairs


def _result(graph, objective, method, res, x, t0, scope="all", info=None) -> SolveResult:
    info = dict(info or {})
    info.update({"mip_status": int(res.status), "mip_message": res.message,
                 "mip_nodes": getattr(res, "mip_node_count", None)})
    bound = getattr(res, "mip_dual_bound", None)
    bound = float(bound) if bound is not None and np.isfinite(bound) else -np.inf
    if res.x is None:
        why = "no feasible placement exists" if res.status == 2 else \
            f"HiGHS found no placement ({res.message})"
        return finish(graph, objective, method, None, t0, bound=bound, status=why,
                      scope=scope, info=info)
    info["mip_objective_s"] = float(res.fun)
    p = np.asarray(res.x[x.ravel()].reshape(x.shape)).argmax(axis=1)
    status = "optimal" if res.status == 0 else f"stopped: {res.message}"
    return finish(graph, objective, method, p, t0, bound=bound, proven=res.status == 0 and
                  objective != "parallel", status=status, scope=scope, info=info)


def _solve_from(m: Model, g: CostGraph, objective: str, x: np.ndarray,
                start: Optional[np.ndarray], t0: float, time_limit: Optional[float],
                rel_gap: float, threads: Optional[int], info: dict, method: str = "milp",
                scope: str = "all", floor: float = -np.inf,
                beside: Optional[Callable[[Callable[[], None], Callable[[], bool]], float]] = None
                ) -> SolveResult:
    """Solve ``m`` from the placement ``start`` (ignored when it breaks a limit) within
    what is left of ``time_limit``; never worse than the start, and the bound at least
    :func:`policies.solvers.bounds.lower_bound`, ``floor`` and what ``beside(cancel, done)``
    returns, a bound computed while HiGHS solves (:meth:`Model.solve`)."""
    mip_start, sim = None, Simulator(g)
    if start is not None and sim.check(start) is None:
        start = np.asarray(start, dtype=np.int64)
        info["start_s"] = float(sim.evaluate(start, objective).value)
        onehot = np.zeros(x.shape)
        onehot[np.arange(g.num_nodes), start] = 1.0
        mip_start = (x.ravel(), onehot.ravel())
    else:
        start = None
    scale = lower_bound(g, objective)      # the objective's magnitude for HiGHS
    floor = max(scale, floor)
    spent = time.perf_counter() - t0
    found: list[float] = []
    res = m.solve(None if time_limit is None else max(time_limit - spent, 0.01), rel_gap,
                  scale, start=mip_start, threads=threads,
                  beside=None if beside is None else
                  (lambda cancel, done: found.append(beside(cancel, done))))
    floor = max([floor] + found)
    if mip_start is not None:
        info["start_accepted"] = bool(res.start_accepted)
    out = _result(g, objective, method, res, x, t0, scope=scope, info=info)
    if out.bound < floor and scope == "all":
        out = finish(g, objective, method, out.placement if out.feasible else None, t0,
                     bound=floor, proven=out.optimal, status=out.status, scope=scope,
                     info=out.info)
    if start is not None and (not out.feasible or info["start_s"] < out.value):
        out = finish(g, objective, method, start, t0, bound=out.bound, proven=out.optimal,
                     status=f"the start: HiGHS found none better ({res.message})",
                     scope=scope, info=info)
    return out


def solve_milp_throughput(graph: CostGraph, objective: str = "throughput", *,
                          contiguous: bool = False, time_limit: Optional[float] = 60.0,
                          rel_gap: float = 1e-7, start: Optional[np.ndarray] = None,
                          threads: Optional[int] = None) -> SolveResult:
    """Exact throughput optimum (simulator model), over all or contiguous splits; ``start``
    (a placement) is the MIP start and the result is never worse than it (over all
    splits; a contiguous MILP takes no start)."""
    t0 = time.perf_counter()
    if objective != "throughput":
        raise ValueError(f"solve_milp_throughput solves the throughput objective, not {objective!r}")
    g = graph
    D = g.num_devices
    m = Model()
    x = _placement_vars(m, g)
    y = _receipt(m, g, x)
    tr = g.transfer_s()
    w, ts, pairs = _sent(m, g, x, y, tr)
    z = m.var(1, cost=1.0)
    comp = np.where(np.isinf(g.compute_s), 0.0, g.compute_s)
    for a in range(D):
        ks = [k for k, (s, r) in enumerate(pairs) if s == a or r == a]
        cols = np.concatenate([x[:, a], w[:, ks].ravel(), z])
        coefs = np.concatenate([comp[:, a],
                                np.stack([tr[ts, pairs[k][0], pairs[k][1]] for k in ks],
                                         axis=1).ravel() if ks else np.zeros(0), [-1.0]])
        m.rows(cols[None, :], coefs[None, :], ub=0.0)
    method = "milp"
    info: dict = {}
    if contiguous:
        method = "milp-contig"
        cg = contiguity(g, merge_leaves=False)
        rep = np.zeros(cg.num_groups, dtype=np.int64)
        rep[cg.group[::-1]] = np.arange(g.num_nodes)[::-1]
        for d in range(D):   # groups (classes fused with the cycles they close) move as one
            others = np.flatnonzero(np.arange(g.num_nodes) != rep[cg.group])
            m.rows(np.stack([x[others, d], x[rep[cg.group[others]], d]], axis=1),
                   [1.0, -1.0], 0.0, 0.0)
        o = m.var((D, D), ub=np.where(np.eye(D, dtype=bool), 0.0, 1.0), integer=True)
        for a, b in itertools.combinations(range(D), 2):
            m.rows([[o[a, b], o[b, a]]], [1.0, 1.0], 1.0, 1.0)
        for a, b, c in itertools.permutations(range(D), 3):
            m.rows([[o[a, b], o[b, c], o[c, a]]], [1.0, 1.0, 1.0], ub=2.0)
        if uniform_transfer(g) is not None:
            for cls in device_classes(g):
                for a, b in zip(cls[:-1], cls[1:]):
                    m.rows([[o[a, b]]], [1.0], 1.0, 1.0)
        ge = cg.edges
        for a, b in _pairs(D):
            m.rows(np.stack([x[rep[ge[:, 0]], a], x[rep[ge[:, 1]], b],
                             np.full(len(ge), o[a, b])], axis=1), [1.0, 1.0, -1.0], ub=1.0)
        info["groups"] = cg.num_groups
    return _solve_from(m, g, objective, x, None if contiguous else start, t0, time_limit,
                       rel_gap, threads, info, method, "contiguous" if contiguous else "all")


def solve_milp_parallel(graph: CostGraph, objective: str = "parallel", *,
                        time_limit: Optional[float] = 60.0, rel_gap: float = 1e-7) -> SolveResult:
    """Disjunctive scheduling MILP for small graphs; its bound is valid for the simulator."""
    t0 = time.perf_counter()
    if objective != "parallel":
        raise ValueError(f"solve_milp_parallel solves the parallel objective, not {objective!r}")
    g = graph
    n, D = g.num_nodes, g.num_devices
    if n > PARALLEL_MAX_NODES:
        raise ValueError(f"the parallel MILP is for graphs of at most {PARALLEL_MAX_NODES} "
                         f"nodes, this one has {n}; use heft")
    m = Model()
    x = _placement_vars(m, g)
    tr = g.transfer_s()
    comp = np.where(np.isinf(g.compute_s), 0.0, g.compute_s)
    horizon = float(comp.max(axis=1).sum() + tr.max(axis=(1, 2)).sum() + 1.0)
    S = m.var(n, ub=horizon)
    C = m.var(1, cost=1.0)
    # C >= S_i + dur_i
    m.rows(np.concatenate([np.stack([C.repeat(n), S], axis=1), x], axis=1),
           np.concatenate([np.tile([1.0, -1.0], (n, 1)), -comp], axis=1), lb=0.0)
    pairs = _pairs(D)
    E = len(g.edge_src)
    zt = m.var((E, len(pairs)))
    for k, (a, b) in enumerate(pairs):
        m.rows(np.stack([zt[:, k], x[g.edge_src, a], x[g.edge_dst, b]], axis=1),
               [1.0, -1.0, -1.0], lb=-1.0)
    # S_v - S_u - dur_u - sum tr z >= 0
    trk = np.stack([tr[g.edge_tensor, a, b] for a, b in pairs], axis=1)
    m.rows(np.concatenate([np.stack([S[g.edge_dst], S[g.edge_src]], axis=1),
                           x[g.edge_src], zt], axis=1),
           np.concatenate([np.tile([1.0, -1.0], (E, 1)), -comp[g.edge_src], -trk], axis=1), lb=0.0)
    dag = nx.DiGraph()
    dag.add_nodes_from(range(n))
    dag.add_edges_from(zip(g.edge_src.tolist(), g.edge_dst.tolist()))
    reach = {i: nx.descendants(dag, i) for i in range(n)}
    free = [(i, j) for i, j in itertools.combinations(range(n), 2) if j not in reach[i]]
    if free:
        fi, fj = np.array(free).T
        q = m.var(len(free), ub=1.0, integer=True)
        H = horizon
        for d in range(D):
            # S_j >= S_i + dur_i - H (1 - q) - H (2 - x_id - x_jd)
            m.rows(np.concatenate([np.stack([S[fj], S[fi], q, x[fi, d], x[fj, d]], axis=1),
                                   x[fi]], axis=1),
                   np.concatenate([np.tile([1.0, -1.0, -H, -H, -H], (len(free), 1)),
                                   -comp[fi]], axis=1), lb=-3 * H)
            # S_i >= S_j + dur_j - H q - H (2 - x_id - x_jd)
            m.rows(np.concatenate([np.stack([S[fi], S[fj], q, x[fi, d], x[fj, d]], axis=1),
                                   x[fj]], axis=1),
                   np.concatenate([np.tile([1.0, -1.0, H, -H, -H], (len(free), 1)),
                                   -comp[fj]], axis=1), lb=-2 * H)
    res = m.solve(time_limit, rel_gap, lower_bound(g, objective))
    return _result(g, objective, "milp", res, x, t0, info={"horizon_s": horizon})
