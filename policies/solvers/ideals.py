"""Optimal contiguous throughput splits by dynamic programming over ideals (Tarnawski et al. 2020).

**Contiguous splits.** Nodes are grouped: a co-location class is one group, and
in training graphs a backward node rides with its class (the paper's model).
The *precedence DAG* ``H`` over groups has an edge for every forward edge
(every edge when the graph has no backward nodes), plus, for a backward-only
group, its backward edges reversed (the paper's artificial forward node). A
cycle of ``H`` is fused into one group (no contiguous split can cut it). A
split is *contiguous* when its devices' blocks can be ordered ``B_1..B_m`` so
that every edge of ``H`` goes from ``B_i`` to ``B_j`` with ``i <= j``;
equivalently there is a chain of ideals (down-sets of ``H``)
``{} = I_0 ⊆ I_1 ⊆ ... ⊆ I_m = V`` with ``B_j = I_j \\ I_{j-1}``.

**Load model.** The load of block ``S`` on a device of class ``k`` is::

    load_k(S) = sum_{v in S} c[v, k] + sum_t tr_t * ([src_t in S and some consumer not in S]
                                                    + [src_t not in S and some consumer in S])

i.e. a tensor costs its (device-independent) transfer time ``tr_t`` once on
each side it crosses. This is the simulator's ``throughput`` objective
(:mod:`envs.simulator`) except in one place: the simulator charges the
*sender* once per destination device, this model once per tensor. The two
agree on every placement where no tensor is sent from its device to two or
more other devices; otherwise the simulator's value is larger. Hence the DP
optimum ``OPT_dp`` is a lower bound on the simulator's optimum over contiguous
splits, and the DP's split is reported with its simulator value, optimal
whenever the two agree. (The paper's code also frees CPUs from communication;
the simulator does not, and neither does this DP.)

**Recurrence.** Devices fall into classes of identical devices (same compute
column, same memory). With ``u`` the number of devices of each class used::

    f(0, {}) = 0,   f(u, I) = min_k min_{I' ⊆ I} max(f(u - e_k, I'), load_k(I \\ I'))

(``I' = I`` leaves a device empty.) ``OPT_dp = f(n, V)``.

**Vectorisation.** ``I' ⊆ I`` holds iff ``I`` contains the maximal groups of
``I'`` (a handful). ``load_k(I \\ I')`` for all pairs is a matrix: compute and
memory are differences of per-ideal sums; a tensor's crossing indicator is a
function of the pair of per-ideal labels ``(src in I, #consumer groups in I)``,
and any function ``h(x(I), y(I'))`` of finite labels is the bilinear form
``sum_x [x(I) = x] * (sum_y h(x, y) [y(I') = y])``; all tensors together are
one matrix product ``Phi @ Psi.T``. The DP then takes
``min_{I'} max(f[I'], load[I, I'])`` with numpy, in row chunks.

**Zero-work leaves.** When memory cannot bind (the whole graph fits on every
device with a finite capacity), a group with zero compute everywhere that
touches a single other group is merged into it: moving it there never adds a
transfer nor breaks contiguity, so the optimum is unchanged, and the number
of ideals can drop by orders of magnitude (GNMT's many zero-cost sinks).
"""
from __future__ import annotations

import itertools
import time
from dataclasses import dataclass
from typing import Optional

import networkx as nx
import numpy as np

from hsdag_core.costgraph import CostGraph
from policies.solvers.result import (SolveResult, colocation_groups, device_classes, finish,
                             uniform_transfer)

__all__ = ["Contiguity", "contiguity", "enumerate_ideals", "solve_dp", "MAX_IDEALS"]

MAX_IDEALS = 60_000
"""Default cap on the number of ideals (the paper's code stops at 60,000 too)."""


@dataclass
class Contiguity:
    """Groups and precedence DAG that define contiguous splits.

    Attributes:
        group: ``[n]`` group of each node, groups numbered in a topological
            order of ``edges``.
        num_groups: number of groups.
        edges: ``[E, 2]`` precedence edges between groups (a DAG).
        leaves: number of zero-work leaf groups merged into a neighbour.
    """

    group: np.ndarray
    num_groups: int
    edges: np.ndarray
    leaves: int


def _union_find(n: int):
    parent = list(range(n))

    def find(a: int) -> int:
        while parent[a] != a:
            parent[a] = parent[parent[a]]
            a = parent[a]
        return a
    return parent, find


def contiguity(graph: CostGraph, merge_leaves: bool = True) -> Contiguity:
    """Build the groups and precedence DAG of the module docstring."""
    g = graph
    n = g.num_nodes
    grp = colocation_groups(g)
    leaves = 0
    if merge_leaves and not (g.mem_capacity < g.mem_bytes.sum()).any():
        parent, find = _union_find(int(grp.max()) + 1)
        zero = np.all(g.compute_s == 0, axis=1)
        changed = True
        while changed:
            changed = False
            root = np.array([find(int(x)) for x in grp])
            zero_grp: dict[int, bool] = {}
            for i in range(n):
                zero_grp[root[i]] = zero_grp.get(root[i], True) and bool(zero[i])
            nbrs: dict[int, set[int]] = {}
            for u, v in zip(root[g.edge_src], root[g.edge_dst]):
                if u != v:
                    nbrs.setdefault(int(u), set()).add(int(v))
                    nbrs.setdefault(int(v), set()).add(int(u))
            for r, ok in zero_grp.items():
                near = nbrs.get(r, set())
                if ok and len(near) == 1:
                    (other,) = near
                    if find(other) != find(r):
                        leaves += 1
                        parent[find(r)] = find(other)
                        changed = True
                        break
        root = np.array([find(int(x)) for x in grp])
        _, grp = np.unique(root, return_inverse=True)
    bw = g.is_backward if g.is_backward is not None else np.zeros(n, dtype=bool)
    G = int(grp.max()) + 1
    has_fw = np.zeros(G, dtype=bool)
    has_fw[grp[~bw]] = True
    H = nx.DiGraph()
    H.add_nodes_from(range(G))
    for u, v in zip(g.edge_src, g.edge_dst):
        a, b = int(grp[u]), int(grp[v])
        if a == b:
            continue
        if not bw[u] and not bw[v]:
            H.add_edge(a, b)
        elif bw[u] and bw[v] and not (has_fw[a] and has_fw[b]):
            H.add_edge(b, a)
    C = nx.condensation(H)
    order = list(nx.lexicographical_topological_sort(C, key=lambda c: min(C.nodes[c]["members"])))
    rank = {c: i for i, c in enumerate(order)}
    to_new = np.empty(G, dtype=np.int64)
    for c in C.nodes:
        for old in C.nodes[c]["members"]:
            to_new[old] = rank[c]
    edges = np.array(sorted({(rank[a], rank[b]) for a, b in C.edges}), dtype=np.int64).reshape(-1, 2)
    return Contiguity(to_new[grp], len(order), edges, leaves)


def enumerate_ideals(num_groups: int, edges: np.ndarray, limit: int = MAX_IDEALS) -> np.ndarray:
    """All ideals (down-sets) of the DAG, as a ``[N, G]`` bool matrix sorted by size.

    Level by level: the ideals of size ``s + 1`` are those of size ``s`` plus one
    group whose predecessors are all in. Raises ``ValueError`` past ``limit``.
    """
    G = num_groups
    P = np.zeros((G, G), dtype=np.float32)       # P[u, v] = 1 for an edge u -> v
    if edges.size:
        P[edges[:, 0], edges[:, 1]] = 1.0
    level = np.zeros((1, G), dtype=bool)
    out = [level]
    total = 1
    for _ in range(G):
        missing = (~level).astype(np.float32) @ P    # predecessors outside the ideal
        cand = (missing == 0) & ~level
        rows, cols = np.nonzero(cand)
        if rows.size == 0:
            break
        nxt = level[rows].copy()
        nxt[np.arange(rows.size), cols] = True
        packed = np.packbits(nxt, axis=1)
        _, keep = np.unique(packed, axis=0, return_index=True)
        level = nxt[np.sort(keep)]
        total += level.shape[0]
        if total > limit:
            raise ValueError(f"the graph has more than {limit} ideals, too many for the "
                             "throughput DP; use milp-contig (time-limited) or coarsen the graph")
        out.append(level)
    return np.concatenate(out)


def _maximal_elements(A: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """``[N, W]`` the maximal groups of each ideal (an ideal is the down-set of
    them), padded with the index ``G``; ``W`` is the widest antichain met."""
    N, G = A.shape
    has_succ_in = np.zeros((N, G), dtype=bool)
    for u, v in edges:
        has_succ_in[:, u] |= A[:, v]
    top = A & ~has_succ_in
    W = max(int(top.sum(axis=1).max()), 1)
    out = np.full((N, W), G, dtype=np.int64)
    rows, cols = np.nonzero(top)
    rank = np.arange(rows.size) - np.searchsorted(rows, rows)
    out[rows, rank] = cols
    return out


def _crossing(a_x: int, n_x: int, a_y: np.ndarray, n_y: np.ndarray, r: int) -> np.ndarray:
    """Crossing indicator of one tensor for S = I \\ I' from the labels of I and I'."""
    s_src = a_x - a_y                 # producer in S
    m = n_x - n_y                     # consumer groups in S
    return np.where(s_src == 1, m < r, m > 0).astype(np.float64)


def _comm_features(A: np.ndarray, grp: np.ndarray, graph: CostGraph,
                   tr: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``Phi, Psi`` with ``(Phi @ Psi.T)[I, I'] = communication of I \\ I'``."""
    g = graph
    merged: dict[tuple[int, tuple[int, ...]], float] = {}
    order = np.argsort(g.edge_tensor, kind="stable")
    bounds = np.searchsorted(g.edge_tensor[order], np.arange(g.num_tensors + 1))
    for t in range(g.num_tensors):
        if tr[t] <= 0:
            continue
        gs = int(grp[g.tensor_src[t]])
        cons = np.unique(grp[g.edge_dst[order[bounds[t]:bounds[t + 1]]]])
        cons = tuple(int(c) for c in cons if c != gs)
        if cons:
            merged[(gs, cons)] = merged.get((gs, cons), 0.0) + float(tr[t])
    N = A.shape[0]
    phi: list[np.ndarray] = []
    psi: list[np.ndarray] = []
    for (gs, cons), c in merged.items():
        r = len(cons)
        a = A[:, gs].astype(np.int64)
        cnt = A[:, list(cons)].sum(axis=1, dtype=np.int64)
        lab = a * (r + 1) + cnt
        for x in np.unique(lab):
            h = c * _crossing(int(x) // (r + 1), int(x) % (r + 1), a, cnt, r)
            if h.any():
                phi.append(lab == x)
                psi.append(h)
    if not phi:
        return np.zeros((N, 1)), np.zeros((N, 1))
    return np.array(phi, dtype=np.float64).T, np.array(psi).T


def solve_dp(graph: CostGraph, objective: str = "throughput", *,
             time_limit: Optional[float] = None, max_ideals: int = MAX_IDEALS,
             chunk_elems: int = 4_000_000) -> SolveResult:
    """Optimal contiguous split for the throughput load model of the module docstring.

    Args:
        max_ideals: give up (``ValueError``) past this many ideals.
        chunk_elems: pair-matrix elements held at once per device class.

    The result's ``bound`` is ``OPT_dp`` (a lower bound on the simulator's
    optimum over contiguous splits) and ``scope`` is ``"contiguous"``.
    """
    t0 = time.perf_counter()
    if objective != "throughput":
        raise ValueError(f"the DP solves the throughput objective only, not {objective!r}")
    tr = uniform_transfer(graph)
    if tr is None:
        raise ValueError("the throughput DP needs one transfer time per tensor whatever the "
                         "devices (as in the dnn-partitioning format); use milp-contig")
    cg = contiguity(graph)
    A = enumerate_ideals(cg.num_groups, cg.edges, max_ideals)
    N, G = A.shape
    classes = device_classes(graph)
    K = len(classes)
    grp = cg.group
    Af = A.astype(np.float64)
    tops = _maximal_elements(A, cg.edges)
    member = np.concatenate([A, np.ones((N, 1), dtype=bool)], axis=1)   # column G: padding
    # per-ideal sums for each class: finite compute, unsupported count, memory
    reps = [cls[0] for cls in classes]
    comp = graph.compute_s[:, reps]
    unsup = np.isinf(comp)
    W = np.zeros((G, K))
    U = np.zeros((G, K))
    M = np.zeros(G)
    np.add.at(W, grp, np.where(unsup, 0.0, comp))
    np.add.at(U, grp, unsup.astype(np.float64))
    np.add.at(M, grp, graph.mem_bytes)
    WI, UI, MI = Af @ W, Af @ U, Af @ M
    caps = graph.mem_capacity[reps]
    Phi, Psi = _comm_features(A, grp, graph, tr)
    counts = [len(c) for c in classes]
    states = sorted(itertools.product(*[range(c + 1) for c in counts]), key=sum)
    sid = {s: i for i, s in enumerate(states)}
    f = np.full((len(states), N), np.inf)
    f[sid[tuple([0] * K)], 0] = 0.0
    arg_k = np.full((len(states), N), -1, dtype=np.int64)
    arg_j = np.zeros((len(states), N), dtype=np.int64)
    rows = max(1, chunk_elems // N)
    for r0 in range(0, N, rows):
        if time_limit is not None and time.perf_counter() - t0 > time_limit:
            raise TimeoutError(f"the throughput DP passed its time limit of {time_limit:g} s "
                               f"({N} ideals); raise --time-limit or use milp-contig")
        r1 = min(N, r0 + rows)
        R = slice(r0, r1)
        rows_in = np.ascontiguousarray(member[R].T)     # [G + 1, rows]
        subset_t = np.ones((r1, r1 - r0), dtype=bool)
        for w in range(tops.shape[1]):                  # I' ⊆ I iff I holds I''s tops
            subset_t &= rows_in[tops[:r1, w]]
        subset = subset_t.T
        comm = Phi[R] @ Psi[:r1].T
        outside = ~subset
        load = []
        for k in range(K):
            L = np.subtract.outer(WI[R, k], WI[:r1, k])
            L += comm
            bad = outside
            if U[:, k].any():                           # a node this class cannot run
                bad = bad | (np.subtract.outer(UI[R, k], UI[:r1, k]) > 0.5)
            if np.isfinite(caps[k]):                    # over this class's memory
                bad = bad | (np.subtract.outer(MI[R], MI[:r1]) > caps[k])
            np.putmask(L, bad, np.inf)
            load.append(L)
        for s in states:
            if not any(s):
                continue
            best = np.full(r1 - r0, np.inf)
            bk = np.full(r1 - r0, -1, dtype=np.int64)
            bj = np.zeros(r1 - r0, dtype=np.int64)
            for k in range(K):
                if s[k] == 0:
                    continue
                prev = sid[s[:k] + (s[k] - 1,) + s[k + 1:]]
                cand = np.maximum(load[k], f[prev, None, :r1])
                j = cand.argmin(axis=1)
                v = cand[np.arange(r1 - r0), j]
                better = v < best
                best[better], bk[better], bj[better] = v[better], k, j[better]
            f[sid[s], R], arg_k[sid[s], R], arg_j[sid[s], R] = best, bk, bj
    full = tuple(counts)
    opt = float(f[sid[full], N - 1])
    info = {"ideals": int(N), "groups": int(G), "leaves_merged": cg.leaves,
            "device_classes": len(classes), "dp_value_s": opt}
    if not np.isfinite(opt):
        return finish(graph, objective, "dp", None, t0, scope="contiguous", info=info,
                      status="no contiguous split fits the devices (memory or support)")
    group_dev = np.full(G, -1, dtype=np.int64)
    s, I = list(full), N - 1
    while I != 0:
        k, j = int(arg_k[sid[tuple(s)], I]), int(arg_j[sid[tuple(s)], I])
        block = A[I] & ~A[j]
        group_dev[block] = classes[k][s[k] - 1]
        s[k] -= 1
        I = j
    placement = group_dev[grp]
    return finish(graph, objective, "dp", placement, t0, bound=opt, scope="contiguous",
                  status="optimal contiguous split of the DP's load model", info=info)
