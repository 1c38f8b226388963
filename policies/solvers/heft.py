"""HEFT list scheduling (Topcuoglu, Hariri & Wu 2002) for the parallel objective.

Priorities are upward ranks::

    rank(i) = w_i + max_{i -> j} (c_ij + rank(j)),

with ``w_i`` the mean compute time of node ``i`` over the devices that can run
it and ``c_ij`` the mean transfer time of the tensor on edge ``i -> j`` over
pairs of distinct devices. Among the nodes whose predecessors are all placed,
the one of highest rank goes to the device that finishes it earliest::

    EFT(i, d) = max(avail_d, max_{u -> i} finish_u + [p_u != d] tr[t, p_u, d]) + c[i, d]

Nodes are appended to a device's queue (no insertion into idle gaps), as the
simulator's first-come-first-served devices run them. Devices that cannot run
the node, or would overflow their memory, are skipped; the first node of a
co-location class picks a device for the whole class (one that runs and
holds all of it). The placement is then evaluated by the simulator; the bound
is :func:`policies.solvers.bounds.lower_bound` (each node's head plus tail, and total work / D).
"""
from __future__ import annotations

import heapq
import time
from typing import Optional

import numpy as np

from hsdag_core.costgraph import CostGraph
from policies.solvers.bounds import lower_bound
from policies.solvers.result import SolveResult, colocation_groups, finish

__all__ = ["upward_rank", "solve_heft"]


def upward_rank(graph: CostGraph) -> np.ndarray:
    """``[n]`` HEFT upward rank of every node."""
    g = graph
    finite = np.where(np.isinf(g.compute_s), np.nan, g.compute_s)
    with np.errstate(all="ignore"):
        w = np.nan_to_num(np.nanmean(finite, axis=1), nan=0.0)
    D = g.num_devices
    tr = g.transfer_s()
    mean_tr = tr.sum(axis=(1, 2)) / max(D * (D - 1), 1)
    rank = w.copy()
    order = np.argsort(g.edge_src, kind="stable")
    ptr = np.searchsorted(g.edge_src[order], np.arange(g.num_nodes + 1))
    for i in range(g.num_nodes - 1, -1, -1):
        es = order[ptr[i]:ptr[i + 1]]
        if es.size:
            rank[i] = w[i] + np.max(mean_tr[g.edge_tensor[es]] + rank[g.edge_dst[es]])
    return rank


def solve_heft(graph: CostGraph, objective: str = "parallel", *,
               time_limit: Optional[float] = None) -> SolveResult:
    """HEFT placement for the parallel objective (module docstring)."""
    t0 = time.perf_counter()
    if objective != "parallel":
        raise ValueError(f"heft is a parallel-latency heuristic, not one for {objective!r}")
    g = graph
    n, D = g.num_nodes, g.num_devices
    tr = g.transfer_s()
    rank = upward_rank(g)
    grp = colocation_groups(g)
    G = int(grp.max()) + 1
    grp_comp = np.zeros((G, D))
    np.add.at(grp_comp, grp, g.compute_s)
    grp_mem = np.bincount(grp, weights=g.mem_bytes, minlength=G)
    grp_dev = np.full(G, -1, dtype=np.int64)
    used = np.zeros(D)
    avail = np.zeros(D)
    finish_t = np.zeros(n)
    p = np.full(n, -1, dtype=np.int64)
    in_order = np.argsort(g.edge_dst, kind="stable")
    in_ptr = np.searchsorted(g.edge_dst[in_order], np.arange(n + 1))
    out_order = np.argsort(g.edge_src, kind="stable")
    out_ptr = np.searchsorted(g.edge_src[out_order], np.arange(n + 1))
    remaining = np.bincount(g.edge_dst, minlength=n)
    ready = [(-rank[i], i) for i in range(n) if remaining[i] == 0]
    heapq.heapify(ready)
    while ready:
        _, i = heapq.heappop(ready)
        c = grp[i]
        if grp_dev[c] >= 0:
            cands = [int(grp_dev[c])]
        else:
            cands = [d for d in range(D) if np.isfinite(grp_comp[c, d])
                     and used[d] + grp_mem[c] <= g.mem_capacity[d]]
            if not cands:
                return finish(g, objective, "heft", None, t0, bound=lower_bound(g, objective),
                              status=f"no device can run and hold node {g.names[i]!r} "
                                     "(and its co-location class) after the nodes placed before it")
        es = in_order[in_ptr[i]:in_ptr[i + 1]]
        srcs, tens = g.edge_src[es], g.edge_tensor[es]
        best_d, best_f = -1, np.inf
        for d in cands:
            arrive = finish_t[srcs] + np.where(p[srcs] == d, 0.0, tr[tens, p[srcs], d])
            f = max(avail[d], arrive.max(initial=0.0)) + g.compute_s[i, d]
            if f < best_f:
                best_d, best_f = d, f
        p[i] = best_d
        finish_t[i] = best_f
        avail[best_d] = best_f
        if grp_dev[c] < 0:
            grp_dev[c] = best_d
            used[best_d] += grp_mem[c]
        for e in out_order[out_ptr[i]:out_ptr[i + 1]]:
            j = g.edge_dst[e]
            remaining[j] -= 1
            if remaining[j] == 0:
                heapq.heappush(ready, (-rank[j], j))
    return finish(g, objective, "heft", p, t0, bound=lower_bound(g, objective),
                  status="HEFT list schedule", info={"heft_makespan_s": float(finish_t.max())})
