"""Baechi's memory-constrained placers m-TOPO, m-ETF and m-SCT (Jeon et al., SoCC 2020).

Baechi places a graph in seconds, from its profile alone, on devices whose memory
limits what each can hold. All three respect every device's memory
(``CostGraph.mem_capacity`` against the bytes of the nodes placed on it,
``CostGraph.mem_bytes``), device support (a node goes only where its compute time is
finite) and co-location (the first node of a class picks a device that runs and holds
the whole class, and the rest of the class follows it), the constraints
:mod:`hsdag_core.fit` checks.

``m-topo``
    The nodes in topological order fill the devices in turn: each device takes nodes
    until the next would exceed its *share*, ``min(capacity, total bytes / D)``, and the
    order moves on to the next device. A node no device takes within its share goes to
    the first device from the current one on that still holds it (within capacity).
    Without memory (all nodes of zero bytes) everything stays on the first device.

``m-etf``
    Earliest-task-first list scheduling: among every ready node (all predecessors
    placed) and every device that runs it and still holds it, the pair with the
    earliest start ``max(avail_d, max_{u -> i} finish_u + [p_u != d] tr[t, p_u, d])``
    is scheduled next (ties: the higher HEFT upward rank, then the lower node, then the
    lower device); a device runs its nodes one after another (no insertion).

``m-sct``
    m-ETF with the *favourite child* rule of the small-communication-times algorithm
    (Hanen & Munier): a node's favourite child is kept on its device. Baechi picks the
    favourite children from an LP relaxation of the schedule; this implementation uses
    a **greedy rule** instead: edges taken in decreasing order of their (mean) transfer
    time, ties by the child's higher upward rank, each becomes a favourite pair when its
    parent has no favourite child yet and its child no favourite parent. A favourite
    child then considers only its favourite parent's device while that runs and holds
    it, and at equal start times it goes before other nodes.

Each placement is then evaluated by the simulator under the run's objective (the list
schedules are built for the parallel objective; their placement is measured under any).
The bound is :func:`policies.solvers.bounds.lower_bound`. The planning time is the
result's ``solve_s`` (also ``info["planning_s"]``).
"""
from __future__ import annotations

import time
from typing import Optional

import numpy as np

from hsdag_core.costgraph import CostGraph
from policies.solvers.bounds import lower_bound
from policies.solvers.heft import upward_rank
from policies.solvers.result import SolveResult, colocation_groups, finish

__all__ = ["solve_m_topo", "solve_m_etf", "solve_m_sct", "favourite_children"]


def _groups(g: CostGraph):
    grp = colocation_groups(g)
    G = int(grp.max()) + 1 if g.num_nodes else 0
    comp = np.zeros((G, g.num_devices))
    np.add.at(comp, grp, g.compute_s)
    mem = np.bincount(grp, weights=g.mem_bytes, minlength=G)
    return grp, comp, mem


def _result(g: CostGraph, objective: str, method: str, p: Optional[np.ndarray], t0: float,
            status: str, info: Optional[dict] = None) -> SolveResult:
    res = finish(g, objective, method, p, t0, bound=lower_bound(g, objective), status=status,
                 info=dict(info or {}))
    res.info["planning_s"] = res.solve_s
    return res


def solve_m_topo(graph: CostGraph, objective: str = "parallel", *,
                 time_limit: Optional[float] = None) -> SolveResult:
    """m-TOPO (module docstring)."""
    t0 = time.perf_counter()
    g = graph
    n, D = g.num_nodes, g.num_devices
    grp, gcomp, gmem = _groups(g)
    share = np.minimum(g.mem_capacity, g.mem_bytes.sum() / D)
    used = np.zeros(D)
    dev_of = np.full(gmem.size, -1, dtype=np.int64)
    p = np.full(n, -1, dtype=np.int64)
    cur = 0
    for i in range(n):
        c = grp[i]
        if dev_of[c] < 0:
            order = [(cur + k) % D for k in range(D)]
            runs = [d for d in order if np.isfinite(gcomp[c, d])]
            within = [d for d in runs[:] if used[d] + gmem[c] <= share[d]
                      and d >= cur]  # fill in turn: never back to a device left behind
            fits = [d for d in runs if used[d] + gmem[c] <= g.mem_capacity[d]]
            if within:
                d = within[0]
                cur = d
            elif fits:
                d = fits[0]
            else:
                return _result(g, objective, "m-topo", None, t0,
                               f"no device can run and hold node {g.names[i]!r} (and its "
                               "co-location class) after the nodes placed before it")
            dev_of[c] = d
            used[d] += gmem[c]
        p[i] = dev_of[c]
    return _result(g, objective, "m-topo", p, t0, "m-TOPO (Baechi) topological fill",
                   {"share_bytes": [float(s) for s in share]})


def favourite_children(graph: CostGraph, rank: Optional[np.ndarray] = None) -> np.ndarray:
    """``[n]`` favourite child of each node (-1: none), by the greedy rule of the module
    docstring (edges by decreasing mean transfer time, each node at most one favourite
    child and one favourite parent)."""
    g = graph
    n, D = g.num_nodes, g.num_devices
    if rank is None:
        rank = upward_rank(g)
    tr = g.transfer_s()
    mean_tr = tr.sum(axis=(1, 2)) / max(D * (D - 1), 1)
    w = mean_tr[g.edge_tensor]
    order = np.lexsort((g.edge_src, -rank[g.edge_dst], -w))
    fav = np.full(n, -1, dtype=np.int64)
    has_parent = np.zeros(n, dtype=bool)
    for e in order:
        u, j = int(g.edge_src[e]), int(g.edge_dst[e])
        if fav[u] < 0 and not has_parent[j]:
            fav[u] = j
            has_parent[j] = True
    return fav


def _list_schedule(graph: CostGraph, objective: str, method: str, sct: bool) -> SolveResult:
    t0 = time.perf_counter()
    g = graph
    n, D = g.num_nodes, g.num_devices
    tr = g.transfer_s()
    rank = upward_rank(g)
    grp, gcomp, gmem = _groups(g)
    fav = favourite_children(g, rank) if sct else np.full(n, -1, dtype=np.int64)
    fav_parent = np.full(n, -1, dtype=np.int64)
    fav_parent[fav[fav >= 0]] = np.nonzero(fav >= 0)[0]
    dev_of = np.full(gmem.size, -1, dtype=np.int64)
    used = np.zeros(D)
    avail = np.zeros(D)
    finish_t = np.zeros(n)
    p = np.full(n, -1, dtype=np.int64)
    in_order = np.argsort(g.edge_dst, kind="stable")
    in_ptr = np.searchsorted(g.edge_dst[in_order], np.arange(n + 1))
    out_order = np.argsort(g.edge_src, kind="stable")
    out_ptr = np.searchsorted(g.edge_src[out_order], np.arange(n + 1))
    remaining = np.bincount(g.edge_dst, minlength=n)
    data_ready = np.zeros((n, D))      # when node i's inputs are all on device d
    ready: list[int] = []

    def becomes_ready(i: int) -> None:
        es = in_order[in_ptr[i]:in_ptr[i + 1]]
        srcs, tens = g.edge_src[es], g.edge_tensor[es]
        for d in range(D):
            arrive = finish_t[srcs] + np.where(p[srcs] == d, 0.0, tr[tens, p[srcs], d])
            data_ready[i, d] = arrive.max(initial=0.0)
        ready.append(i)

    for i in range(n):
        if remaining[i] == 0:
            becomes_ready(i)
    while ready:
        best = None
        for i in ready:
            c = grp[i]
            if dev_of[c] >= 0:
                cands = [int(dev_of[c])]
            else:
                cands = [d for d in range(D) if np.isfinite(gcomp[c, d])
                         and used[d] + gmem[c] <= g.mem_capacity[d]]
            fp = fav_parent[i]
            kept = sct and fp >= 0 and int(p[fp]) in cands
            if kept:
                cands = [int(p[fp])]
            for d in cands:
                key = (max(avail[d], data_ready[i, d]), not kept, -rank[i], i, d)
                if best is None or key < best:
                    best = key
        if best is None:
            i = min(ready)
            return _result(g, objective, method, None, t0,
                           f"no device can run and hold node {g.names[i]!r} (and its "
                           "co-location class) after the nodes placed before it")
        start, _, _, i, d = best
        ready.remove(i)
        c = grp[i]
        p[i] = d
        finish_t[i] = start + g.compute_s[i, d]
        avail[d] = finish_t[i]
        if dev_of[c] < 0:
            dev_of[c] = d
            used[d] += gmem[c]
        for e in out_order[out_ptr[i]:out_ptr[i + 1]]:
            j = g.edge_dst[e]
            remaining[j] -= 1
            if remaining[j] == 0:
                becomes_ready(int(j))
    name = "m-SCT (Baechi, greedy favourite children)" if sct else "m-ETF (Baechi)"
    info = {"schedule_makespan_s": float(finish_t.max(initial=0.0))}
    if sct:
        info["favourite_pairs"] = int((fav >= 0).sum())
    return _result(g, objective, method, p, t0, f"{name} list schedule", info)


def solve_m_etf(graph: CostGraph, objective: str = "parallel", *,
                time_limit: Optional[float] = None) -> SolveResult:
    """m-ETF (module docstring)."""
    return _list_schedule(graph, objective, "m-etf", sct=False)


def solve_m_sct(graph: CostGraph, objective: str = "parallel", *,
                time_limit: Optional[float] = None) -> SolveResult:
    """m-SCT with greedy favourite children (module docstring)."""
    return _list_schedule(graph, objective, "m-sct", sct=True)
