"""Mixed-integer programs (HiGHS through ``scipy.optimize.milp``) for the three objectives.

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

``sequential`` (:func:`solve_milp_sequential`)::

    min sum c[i,d] x[i,d] + sum tr[t,a,d] w[t,a,d] + beta sum_i sum_d b[i,d],
    b[i, d] >= x[i, d] - x[i+1, d]             (sum_d b[i, d] = [p_i != p_{i+1}])

Interchangeable devices of unlimited memory (e.g. the benchmark's CPU cores)
are all but one left empty, which loses nothing for this objective
(:func:`policies.solvers.result.redundant_for_sequential`).

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
from typing import Optional, Sequence

import networkx as nx
import numpy as np
import scipy.sparse as sp
from scipy.optimize import Bounds, LinearConstraint, milp

from hsdag_core.costgraph import CostGraph
from policies.solvers.bounds import lower_bound
from policies.solvers.ideals import contiguity
from policies.solvers.result import (SolveResult, colocation_groups, device_classes, finish,
                             redundant_for_sequential, uniform_transfer)

__all__ = ["solve_milp_sequential", "solve_milp_throughput", "solve_milp_parallel",
           "PARALLEL_MAX_NODES"]

PARALLEL_MAX_NODES = 40
"""Largest graph the disjunctive parallel MILP accepts."""


class _Model:
    """A MILP assembled column by column, rows in COO form."""

    def __init__(self) -> None:
        self.cost: list[np.ndarray] = []
        self.lb: list[np.ndarray] = []
        self.ub: list[np.ndarray] = []
        self.integer: list[np.ndarray] = []
        self.nvar = 0
        self.r: list[np.ndarray] = []
        self.c: list[np.ndarray] = []
        self.v: list[np.ndarray] = []
        self.row_lb: list[np.ndarray] = []
        self.row_ub: list[np.ndarray] = []
        self.nrow = 0

    def var(self, shape, lb=0.0, ub=np.inf, integer: bool = False, cost=0.0) -> np.ndarray:
        k = int(np.prod(shape))
        idx = np.arange(self.nvar, self.nvar + k).reshape(shape)
        self.nvar += k
        self.cost.append(np.broadcast_to(np.asarray(cost, dtype=np.float64), shape).ravel())
        self.lb.append(np.broadcast_to(np.asarray(lb, dtype=np.float64), shape).ravel())
        self.ub.append(np.broadcast_to(np.asarray(ub, dtype=np.float64), shape).ravel())
        self.integer.append(np.full(k, int(integer)))
        return idx

    def rows(self, cols, coefs, lb=-np.inf, ub=np.inf) -> None:
        """Add ``R`` rows ``lb <= sum_j coefs[r, j] * var[cols[r, j]] <= ub``."""
        cols = np.atleast_2d(np.asarray(cols, dtype=np.int64))
        R, k = cols.shape
        if R == 0:
            return
        coefs = np.broadcast_to(np.asarray(coefs, dtype=np.float64), (R, k))
        self.r.append(np.repeat(np.arange(self.nrow, self.nrow + R), k))
        self.c.append(cols.ravel())
        self.v.append(coefs.ravel())
        self.row_lb.append(np.broadcast_to(np.asarray(lb, dtype=np.float64), (R,)).copy())
        self.row_ub.append(np.broadcast_to(np.asarray(ub, dtype=np.float64), (R,)).copy())
        self.nrow += R

    def solve(self, time_limit: Optional[float], rel_gap: float, magnitude: float):
        """Solve; the objective is scaled to about 1000 for the solver (HiGHS stops
        at an *absolute* gap of 1e-6, coarse for values of a few ms in seconds)
        and unscaled in the result (``fun``, ``mip_dual_bound``)."""
        scale = 1e3 / magnitude if np.isfinite(magnitude) and magnitude > 0 else 1.0
        A = sp.csr_array((np.concatenate(self.v), (np.concatenate(self.r), np.concatenate(self.c))),
                         shape=(self.nrow, self.nvar))
        opts = {"disp": False, "mip_rel_gap": rel_gap}
        if time_limit is not None:
            opts["time_limit"] = float(time_limit)
        res = milp(scale * np.concatenate(self.cost), integrality=np.concatenate(self.integer),
                   bounds=Bounds(np.concatenate(self.lb), np.concatenate(self.ub)),
                   constraints=[LinearConstraint(A, np.concatenate(self.row_lb),
                                                 np.concatenate(self.row_ub))],
                   options=opts)
        for key in ("fun", "mip_dual_bound"):
            if res.get(key) is not None:
                res[key] = res[key] / scale
        return res


def _placement_vars(m: _Model, graph: CostGraph, unused: Sequence[int] = ()) -> np.ndarray:
    """``x`` with assignment, support, memory and co-location rows; devices
    ``unused`` are left empty."""
    n, D = graph.num_nodes, graph.num_devices
    ub = np.where(np.isinf(graph.compute_s), 0.0, 1.0)
    ub[:, list(unused)] = 0.0
    x = m.var((n, D), ub=ub, integer=True)
    m.rows(x, 1.0, 1.0, 1.0)
    for d in range(D):
        if np.isfinite(graph.mem_capacity[d]) and graph.mem_bytes.sum() > graph.mem_capacity[d]:
            m.rows(x[:, d][None, :], graph.mem_bytes[None, :], ub=graph.mem_capacity[d])
    grp = colocation_groups(graph)
    order = np.argsort(grp, kind="stable")
    same = np.flatnonzero(grp[order][1:] == grp[order][:-1])
    for d in range(D):
        m.rows(np.stack([x[order[same], d], x[order[same + 1], d]], axis=1), [1.0, -1.0], 0.0, 0.0)
    return x


def _receipt(m: _Model, graph: CostGraph, x: np.ndarray) -> np.ndarray:
    """``y[t, d] >= x[v, d] - x[u, d]`` for every edge."""
    y = m.var((graph.num_tensors, graph.num_devices), ub=1.0)
    u = graph.edge_src
    for d in range(graph.num_devices):
        m.rows(np.stack([y[graph.edge_tensor, d], x[graph.edge_dst, d], x[u, d]], axis=1),
               [1.0, -1.0, 1.0], lb=0.0)
    return y


def _pairs(D: int) -> list[tuple[int, int]]:
    return [(a, b) for a in range(D) for b in range(D) if a != b]


def _sent(m: _Model, graph: CostGraph, x: np.ndarray, y: np.ndarray,
          tr: np.ndarray) -> tuple[np.ndarray, np.ndarray, list[tuple[int, int]]]:
    """``w[t, k] >= x[u, a] + y[t, b] - 1`` for the pairs ``k = (a, b)`` and tensors with cost."""
    pairs = _pairs(graph.num_devices)
    ts = np.flatnonzero(np.isin(np.arange(graph.num_tensors), graph.edge_tensor)
                        & (tr.reshape(graph.num_tensors, -1).max(axis=1) > 0))
    w = m.var((ts.size, len(pairs)))
    u = graph.tensor_src[ts]
    for k, (a, b) in enumerate(pairs):
        m.rows(np.stack([w[:, k], x[u, a], y[ts, b]], axis=1), [1.0, -1.0, -1.0], lb=-1.0)
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


def solve_milp_sequential(graph: CostGraph, objective: str = "sequential", *,
                          time_limit: Optional[float] = 60.0, rel_gap: float = 1e-7) -> SolveResult:
    """Exact sequential optimum with memory, support and co-location (module docstring)."""
    t0 = time.perf_counter()
    if objective != "sequential":
        raise ValueError(f"solve_milp_sequential solves the sequential objective, not {objective!r}")
    g = graph
    m = _Model()
    unused = redundant_for_sequential(g)
    x = _placement_vars(m, g, unused)
    m.cost[0] = np.where(np.isinf(g.compute_s), 0.0, g.compute_s).ravel()
    y = _receipt(m, g, x)
    uni = uniform_transfer(g)
    if uni is not None:
        m.cost[-1] = np.repeat(uni, g.num_devices)
    else:
        tr = g.transfer_s()
        w, ts, pairs = _sent(m, g, x, y, tr)
        m.cost[-1] = np.stack([tr[ts, a, b] for a, b in pairs], axis=1).ravel()
    if g.boundary_s > 0 and g.num_nodes > 1:
        b = m.var((g.num_nodes - 1, g.num_devices), cost=g.boundary_s)
        for d in range(g.num_devices):
            m.rows(np.stack([b[:, d], x[:-1, d], x[1:, d]], axis=1), [1.0, -1.0, 1.0], lb=0.0)
    res = m.solve(time_limit, rel_gap, lower_bound(g, objective))
    return _result(g, objective, "milp", res, x, t0, info={"devices_left_empty": len(unused)})


def solve_milp_throughput(graph: CostGraph, objective: str = "throughput", *,
                          contiguous: bool = False, time_limit: Optional[float] = 60.0,
                          rel_gap: float = 1e-7) -> SolveResult:
    """Exact throughput optimum (simulator model), over all or contiguous splits."""
    t0 = time.perf_counter()
    if objective != "throughput":
        raise ValueError(f"solve_milp_throughput solves the throughput objective, not {objective!r}")
    g = graph
    D = g.num_devices
    m = _Model()
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
    res = m.solve(time_limit, rel_gap, lower_bound(g, objective))
    return _result(g, objective, method, res, x, t0,
                   scope="contiguous" if contiguous else "all", info=info)


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
    m = _Model()
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
