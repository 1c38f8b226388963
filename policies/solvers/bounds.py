"""Cheap lower bounds on each simulator objective, valid for every placement.

With ``m_i = min_d compute_s[i, d]`` (each node on its fastest device) and
``D`` devices:

* sequential: ``sum_i m_i`` (transfers and boundaries only add);
* throughput: ``max(max_i m_i, sum_i m_i / D)`` (the busiest device carries at
  least the average load and at least its largest node);
* parallel: ``max(CP, sum_i m_i / D)`` where ``CP`` is the longest path of the
  DAG with node weights ``m_i`` and free transfers (no schedule finishes before
  its critical path, and ``D`` devices cannot finish before total work / ``D``);
* latency: ``CP`` (a CPU node ends at least its compute after its predecessors, and an
  accelerator's call at least the compute of all its nodes after its inputs).

Memory, support and co-location are relaxed, so these bound the constrained
optimum too.
"""
from __future__ import annotations

import numpy as np

from hsdag_core.costgraph import CostGraph

__all__ = ["critical_path_s", "lower_bound"]


def critical_path_s(graph: CostGraph) -> float:
    """Longest path with each node on its fastest device and transfers free."""
    m = graph.compute_s.min(axis=1)
    finish = m.copy()
    order = np.argsort(graph.edge_dst, kind="stable")
    src, dst = graph.edge_src[order], graph.edge_dst[order]
    # nodes are topologically indexed: one pass in index order suffices
    start = np.zeros(graph.num_nodes)
    ptr = np.searchsorted(dst, np.arange(graph.num_nodes + 1))
    for i in range(graph.num_nodes):
        preds = src[ptr[i]:ptr[i + 1]]
        if preds.size:
            start[i] = finish[preds].max()
        finish[i] = start[i] + m[i]
    return float(finish.max()) if graph.num_nodes else 0.0


def lower_bound(graph: CostGraph, objective: str) -> float:
    """The bound of the module docstring for ``objective``."""
    m = graph.compute_s.min(axis=1)
    total = float(m.sum())
    D = graph.num_devices
    if objective == "sequential":
        return total
    if objective == "throughput":
        return max(float(m.max(initial=0.0)), total / D)
    if objective == "parallel":
        return max(critical_path_s(graph), total / D)
    if objective == "latency":
        return critical_path_s(graph)
    raise ValueError(f"unknown objective {objective!r}; choose sequential, parallel, "
                     "throughput or latency")


def _path_cut(graph: CostGraph, path: list[int], base: np.ndarray, move: np.ndarray) -> float:
    """The least sequential cost of ``path``'s nodes and of the transfers between them
    over cuts of the path into segments that each fit one device's memory."""
    g = graph
    P = np.asarray(path, dtype=np.int64)
    L, D = P.size, g.num_devices
    on_edge = {(u, v): t for u, v, t in zip(g.edge_src.tolist(), g.edge_dst.tolist(),
                                            g.edge_tensor.tolist())}
    c = np.array([move[on_edge[(int(P[k]), int(P[k + 1]))]] for k in range(L - 1)])
    runs = np.isfinite(g.compute_s[P])
    comp = np.concatenate([np.zeros((1, D)), np.cumsum(np.where(runs, g.compute_s[P], 0.0), axis=0)])
    cant = np.concatenate([np.zeros((1, D)), np.cumsum(~runs, axis=0)])   # nodes it cannot run
    mem = np.concatenate([[0.0], np.cumsum(g.mem_bytes[P])])
    cap = g.mem_capacity * (1 + 1e-12)
    side = _feeders(g, P, base, move, mem)
    f = np.full((L + 1, D), np.inf)          # f[j, d]: nodes 0..j-1 covered, the last on d
    for j in range(1, L + 1):
        i = np.arange(j)
        if j == 1:
            enter = np.zeros((1, D))
        else:
            prev = f[1:j]                                       # segments ending before i
            order = np.sort(prev, axis=1)
            best, second = order[:, :1], order[:, 1:2] if D > 1 else np.full((j - 1, 1), np.inf)
            other = np.where(prev == best, second, best)       # the best on another device
            enter = np.vstack([np.zeros((1, D)), other + c[:j - 1, None]])
        seg = np.where(cant[j][None, :] > cant[i], np.inf, comp[j][None, :] - comp[i])
        fits = (mem[j] - mem[i])[:, None] <= cap[None, :]
        f[j] = np.where(fits, enter + seg + side[:, i, j - 1].T, np.inf).min(axis=0)
    return float(f[L].min()) + float(base.sum() - base[P].sum())


def _feeders(g: CostGraph, P: np.ndarray, base: np.ndarray, move: np.ndarray,
             mem: np.ndarray) -> np.ndarray:
    """``[D, L, L]``: for a segment ``i..j`` of the path on device ``d``, the least extra
    cost of the nodes off the path whose consumers all lie in it: each is on ``d`` (its
    time there over its fastest, its memory) or sends its tensor to ``d``, the choice
    relaxed to a fractional knapsack in what memory the segment leaves."""
    n, L, D = g.num_nodes, P.size, g.num_devices
    pos = np.full(n, -1, dtype=np.int64)
    pos[P] = np.arange(L)
    lo = np.full(n, L, dtype=np.int64)
    hi = np.full(n, -1, dtype=np.int64)
    np.minimum.at(lo, g.edge_src, np.where(pos[g.edge_dst] >= 0, pos[g.edge_dst], -1))
    np.maximum.at(hi, g.edge_src, np.where(pos[g.edge_dst] >= 0, pos[g.edge_dst], L))
    items = np.flatnonzero((pos < 0) & (lo >= 0) & (hi >= 0) & (hi < L))   # consumers all on the path
    c_w = np.full(n, np.inf)
    np.minimum.at(c_w, g.edge_src, move[g.edge_tensor])
    out = np.zeros((D, L, L))
    if not items.size:
        return out
    done: dict[tuple, np.ndarray] = {}
    for d in range(D):
        key = (g.mem_capacity[d], g.compute_s[items, d].tobytes())
        if key in done:
            out[d] = done[key]
            continue
        extra = g.compute_s[items, d] - base[items]
        gain = np.where(np.isfinite(extra), c_w[items] - extra, -np.inf)
        w = g.mem_bytes[items]
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.where(w > 0, gain / w, np.inf)
        o = np.argsort(-ratio, kind="stable")
        lo_o, hi_o, c_o, g_o, w_o = lo[items][o], hi[items][o], c_w[items][o], gain[o], w[o]
        pos_gain = g_o > 0
        res = np.zeros((L, L))
        for i in range(L):
            inseg = (lo_o[None, :] >= i) & (hi_o[None, :] <= np.arange(L)[:, None])   # [j, item]
            paid = (inseg * c_o).sum(axis=1)
            take = inseg & pos_gain
            cm = np.cumsum(take * w_o, axis=1)
            room = (g.mem_capacity[d] - (mem[1:] - mem[i]))[:, None]
            whole = take & (cm <= room)
            got = (whole * np.where(pos_gain, g_o, 0.0)).sum(axis=1)
            over = take & (cm > room)
            has = over.any(axis=1)
            if has.any():
                r = np.flatnonzero(has)
                k = over[r].argmax(axis=1)
                before = cm[r, k] - w_o[k]
                frac = np.clip((room[r, 0] - before) / np.where(w_o[k] > 0, w_o[k], 1.0), 0, 1)
                got[r] += frac * g_o[k]
            res[i] = np.maximum(paid - got, 0.0)
        done[key] = out[d] = res
    return out


def sequential_bound(graph: CostGraph) -> float:
    """A lower bound on the sequential objective that counts the transfers a split into
    memory-sized parts must pay, along paths.

    Along any path, the devices of its nodes change from one segment to the next, each
    segment fitting the memory of its device, and each change sends the path's tensor
    to another device (a distinct tensor per change, so none is counted twice). A node
    off the path whose consumers all lie in one segment is on that segment's device or
    sends its tensor there (:func:`_feeders`). So the sum, over the nodes off the path, of
    their fastest time, plus the least cost of the path's nodes, of those transfers and of
    those feeders over cuts of the path into such segments (a dynamic program over the
    path), bounds the sequential value of every placement. The
    best over a few paths: the longest by memory, by fastest time, and by transfer time.
    """
    g = graph
    if g.num_nodes == 0 or g.num_devices < 2:
        return lower_bound(graph, "sequential")
    base = np.min(np.where(np.isfinite(g.compute_s), g.compute_s, np.inf), axis=1)
    tr = g.transfer_s()
    move = tr[:, ~np.eye(g.num_devices, dtype=bool)].min(axis=1)    # cheapest link per tensor
    paths = [_longest(g, g.mem_bytes), _longest(g, base),
             _longest(g, np.zeros(g.num_nodes), move[g.edge_tensor])]
    return max(lower_bound(graph, "sequential"), *(_path_cut(g, p, base, move) for p in paths))


def _longest(graph: CostGraph, node_w: np.ndarray, edge_w: np.ndarray | None = None) -> list[int]:
    """The nodes of a longest path with weights on nodes (and edges)."""
    n = graph.num_nodes
    edge_w = np.zeros(graph.edge_src.size) if edge_w is None else edge_w
    best = np.asarray(node_w, dtype=np.float64).copy()
    back = np.full(n, -1, dtype=np.int64)
    for k in np.argsort(graph.edge_dst, kind="stable").tolist():   # nodes are topologically indexed
        u, v = int(graph.edge_src[k]), int(graph.edge_dst[k])
        if best[u] + edge_w[k] + node_w[v] > best[v]:
            best[v], back[v] = best[u] + edge_w[k] + node_w[v], u
    path = [int(np.argmax(best))]
    while back[path[-1]] >= 0:
        path.append(int(back[path[-1]]))
    return path[::-1]
