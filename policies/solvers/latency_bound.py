"""A lower bound on the ``latency`` objective (:mod:`envs.call_latency`) from paths.

Take any path ``v_1 -> ... -> v_L`` of the graph. In a feasible placement the nodes of
the path that one accelerator runs are consecutive on the path (a path that left the
call and came back would make the contracted graph cyclic), so the path is cut into
segments, each on the CPUs or one accelerator's call, at most one segment per
accelerator, the co-located nodes of the path in one call (:func:`_group_span`). A call
whose segment runs from ``v_i`` to ``v_j`` holds every node on a path from ``v_i`` to
``v_j`` (for the same reason): every descendant of ``v_i`` that is an ancestor of
``v_j``. The last node ends no earlier than the sum of the segments' times:
a CPU segment takes at least its nodes' compute, a call at least the compute of those
nodes plus the transfer of the path's tensor entering it (unless it starts the path)
and of the path's tensor leaving it (unless it ends it), and a call holds at least
their memory. Each node outside those that feeds them is either in the call too (its
compute and memory count) or sends its tensor in (its transfer counts): the cheapest
such choice within the call's memory, relaxed to a fractional knapsack, adds to the
call's time (a node of the path outside the segment always sends); so does the transfer
of each other tensor the call sends to a node of the path after the segment. A tensor the
call sends only to nodes off the path (a branch beside it, such as a shortcut) is sent,
or its consumers join the call and what they produce is sent further on, up to where the
branch rejoins the path after the segment: the call pays at least the cheapest tensor of
that branch (:func:`_escapes`). The least such sum, over every cut of the path into segments that respect
memory, support and the number of accelerators, is a dynamic program over the path, and
it bounds the latency of every placement from below. :func:`path_bound` takes the best
of a few paths: the longest by CPU time, by accelerator time, by memory and by transfer
time, and any path given (such as the critical path of a known placement), on the graph
and on its quotient by the blocks of co-located nodes (:func:`_quotient`).
"""
from __future__ import annotations

from typing import Iterable, Optional

import numpy as np
import scipy.sparse as sp

from envs.call_latency import cpu_devices, tensor_cost
from hsdag_core.costgraph import CostGraph
from hsdag_core.reach import Reachability
from policies.solvers.blocks import blocks
from policies.solvers.result import colocation_groups

__all__ = ["path_bound", "path_dp", "longest_path", "critical_path"]


def longest_path(graph: CostGraph, node_w: np.ndarray, edge_w: Optional[np.ndarray] = None) -> list[int]:
    """The nodes of a longest path with weights on nodes (and edges)."""
    n = graph.num_nodes
    edge_w = np.zeros(graph.edge_src.size) if edge_w is None else edge_w
    best = node_w.astype(float).copy()
    back = np.full(n, -1, dtype=np.int64)
    order = np.argsort(graph.edge_dst, kind="stable")   # nodes are topologically indexed
    for k in order.tolist():
        u, v = int(graph.edge_src[k]), int(graph.edge_dst[k])
        if best[u] + edge_w[k] + node_w[v] > best[v]:
            best[v], back[v] = best[u] + edge_w[k] + node_w[v], u
    v = int(np.argmax(best))
    path = [v]
    while back[path[-1]] >= 0:
        path.append(int(back[path[-1]]))
    return path[::-1]


def critical_path(graph: CostGraph, end: np.ndarray) -> list[int]:
    """A path to the latest-ending node of a placement (``end``: each node's end time),
    going back each time through the predecessor that ends last."""
    preds: list[list[int]] = [[] for _ in range(graph.num_nodes)]
    for u, v in zip(graph.edge_src.tolist(), graph.edge_dst.tolist()):
        preds[v].append(u)
    path = [int(np.argmax(end))]
    while preds[path[-1]]:
        path.append(max(preds[path[-1]], key=lambda u: end[u]))
    return path[::-1]


def path_dp(graph: CostGraph, path: list[int], reach: Optional[Reachability] = None) -> float:
    """The least time of ``path`` over its cuts into segments (module docstring)."""
    g = graph
    if reach is None:
        reach = Reachability.of(np.stack([g.edge_src, g.edge_dst]), g.num_nodes)
    is_cpu = cpu_devices(g)
    accs = np.flatnonzero(~is_cpu)
    cpus = np.flatnonzero(is_cpu)
    K, L = accs.size, len(path)
    P = np.asarray(path, dtype=np.int64)
    cost = tensor_cost(g)
    edge = {(u, v): t for u, v, t in zip(g.edge_src.tolist(), g.edge_dst.tolist(),
                                         g.edge_tensor.tolist())}
    c = np.array([cost[edge[(int(P[i]), int(P[i + 1]))]] for i in range(L - 1)] + [0.0])
    cin = np.concatenate([[0.0], c[:-1]])          # tensor entering position i
    cpu_t = g.compute_s[P][:, cpus].min(axis=1) if cpus.size else np.full(L, np.inf)
    cap = g.mem_capacity[accs].max() if K else 0.0
    Ccpu = np.concatenate([[0.0], np.cumsum(np.where(np.isfinite(cpu_t), cpu_t, 0.0))])
    Cbad = np.concatenate([[0], np.cumsum(~np.isfinite(cpu_t))])    # nodes no CPU runs
    # between[i, j]: v_i, v_j and the nodes on a path from v_i to v_j
    desc = np.stack([reach.descendants(int(v)) for v in P]).astype(np.float64)
    anc = np.stack([reach.ancestors(int(v)) for v in P]).astype(np.float64)
    desc[np.arange(L), P] = 1.0
    anc[np.arange(L), P] = 1.0
    acc_all = g.compute_s[:, accs].min(axis=1) if K else np.full(g.num_nodes, np.inf)
    acc_all = np.where(np.isfinite(acc_all), acc_all, 1e300)
    work = (desc * acc_all) @ anc.T                 # [i, j], j >= i
    mem = (desc * g.mem_bytes) @ anc.T
    side = _side_inputs(g, P, desc, anc, mem, cap, acc_all, cost) if K else np.zeros((L, L))
    first, last = _group_span(g, P)
    f = np.full((L + 1, K + 1), np.inf)
    f[0, 0] = 0.0
    for j in range(1, L + 1):
        i = np.arange(j)
        # a call holds the whole of each co-location group it holds a node of
        whole = (np.minimum.accumulate(first[:j][::-1])[::-1] >= i) & \
            (np.maximum.accumulate(last[:j][::-1])[::-1] <= j - 1)
        cpu_seg = np.where(Cbad[j] > Cbad[i], np.inf, Ccpu[j] - Ccpu[i])
        acc_seg = cin[i] + work[i, j - 1] + side[i, j - 1] + (c[j - 1] if j < L else 0.0)
        acc_seg = np.where((mem[i, j - 1] <= cap * (1 + 1e-12)) & (work[i, j - 1] < 1e299)
                           & whole, acc_seg, np.inf)
        with np.errstate(invalid="ignore"):
            f[j, :] = np.nanmin(f[i, :] + cpu_seg[:, None], axis=0)
            if K:
                f[j, 1:] = np.minimum(f[j, 1:], np.nanmin(f[i, :-1] + acc_seg[:, None], axis=0))
    return float(f[L].min())


def _group_span(g: CostGraph, P: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each position of the path, the first and the last position of the path's nodes
    co-located with it. A call holds a co-location group whole, so a call's segment holds
    every position from the first to the last of each group it touches: in an operator
    graph a node and the zero-cost outputs it is co-located with (a batch normalisation's)
    would otherwise be free places to end one call and start the next. Groups on the CPUs
    may be split by a call between their nodes, so CPU segments are not constrained."""
    grp = colocation_groups(g)[P]
    _, inv = np.unique(grp, return_inverse=True)
    pos = np.arange(P.size)
    lo = np.full(inv.max(initial=-1) + 1, P.size)
    hi = np.full(inv.max(initial=-1) + 1, -1)
    np.minimum.at(lo, inv, pos)
    np.maximum.at(hi, inv, pos)
    return lo[inv], hi[inv]


def _side_inputs(g: CostGraph, P: np.ndarray, desc: np.ndarray, anc: np.ndarray,
                 mem: np.ndarray, cap: float, acc: np.ndarray, cost: np.ndarray) -> np.ndarray:
    """``[i, j]`` the least extra time the nodes feeding the call of segment ``i..j`` add
    (module docstring)."""
    n, L = g.num_nodes, P.size
    node_c = np.full(n, np.inf)
    np.minimum.at(node_c, g.edge_src, cost[g.edge_tensor])
    into = sp.csr_matrix((np.ones(g.edge_src.size), (g.edge_src, g.edge_dst)), shape=(n, n))
    on_path = np.zeros(n, dtype=bool)
    on_path[P] = True
    gain = np.where(np.isfinite(node_c) & (acc < 1e299), node_c - acc, -np.inf)
    items = np.flatnonzero(~on_path & (gain > 0))
    with np.errstate(divide="ignore"):
        ratio = np.where(g.mem_bytes[items] > 0, gain[items] / g.mem_bytes[items], np.inf)
    items = items[np.argsort(-ratio, kind="stable")]
    i_mem, i_gain = g.mem_bytes[items], gain[items]
    path_c = np.where(np.isfinite(node_c[P]), node_c[P], 0.0)
    base_c = np.where(~on_path & np.isfinite(node_c), node_c, 0.0)
    # tensors consumed by the path after position j: forced out of a call ending at j
    last = np.full(g.num_tensors, -1, dtype=np.int64)
    pos = np.full(n, -1, dtype=np.int64)
    pos[P] = np.arange(L)
    np.maximum.at(last, g.edge_tensor, pos[g.edge_dst])
    on_edge = {(u, v): t for u, v, t in zip(g.edge_src.tolist(), g.edge_dst.tolist(),
                                            g.edge_tensor.tolist())}
    path_t = np.array([on_edge[(int(P[k]), int(P[k + 1]))] for k in range(L - 1)] + [-1])
    esc_t, esc, cons_off, n_off, comps = _escapes(g, on_path, cost)
    extra = np.full((L, L), np.inf)
    for i in range(L):
        rows = i + np.flatnonzero(mem[i, i:] <= cap * (1 + 1e-12))
        if not rows.size:
            continue
        inside = desc[i][None, :] * anc[rows]                       # [R, n]
        fed = (np.asarray((into @ inside.T).T) > 0) & (inside == 0)  # nodes feeding the call
        pc = path_c.copy()
        if i:
            pc[i - 1] = 0.0                                          # counted as the path's input
        fixed = fed @ base_c + fed[:, P] @ pc
        S = fed[:, items]
        cm = np.cumsum(S * i_mem, axis=1)
        room = (cap - mem[i, rows])[:, None]
        whole = S & (cm <= room)
        got = (whole * i_gain).sum(axis=1)
        over = S & (cm > room)
        has = over.any(axis=1)
        if has.any():
            k = over.argmax(axis=1)
            r = np.flatnonzero(has)
            before = cm[r, k[r]] - i_mem[k[r]]
            frac = np.clip((room[r, 0] - before) / np.where(i_mem[k[r]] > 0, i_mem[k[r]], 1.0), 0, 1)
            got[r] += frac * i_gain[k[r]]
        later = (last[None, :] > rows[:, None]).astype(float) * cost[None, :]     # [R, T]
        own = path_t[rows] >= 0
        later[np.flatnonzero(own), path_t[rows][own]] = 0.0          # counted as the path's output
        sent = (inside[:, g.tensor_src] * later).sum(axis=1)
        gone = 0.0
        if esc_t.size:  # tensors leaving the call for nodes off the path only
            leave = (inside[:, g.tensor_src[esc_t]] > 0) & (later[:, esc_t] == 0)
            leave &= np.asarray(cons_off.T @ inside.T).T < n_off[None, :]  # a consumer outside
            leave[:, esc_t == (path_t[i - 1] if i else -1)] = False       # the path's input
            leave &= esc_t[None, :] != path_t[rows][:, None]               # the path's output
            if leave.any():
                e = np.where(leave, esc[None, :], 0.0)
                gone = sum(e[:, cols].max(axis=1) for cols in comps)
        extra[i, rows] = fixed - got + sent + gone
    return extra


def _escapes(g: CostGraph, on_path: np.ndarray, cost: np.ndarray
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, list[np.ndarray]]:
    """What a call pays for a tensor it sends to nodes off the path only: the tensor's
    transfer, or, where its consumers join the call, the least that leaves further on
    (``out[w]``: the largest over ``w``'s tensors of that tensor's cost and the largest
    ``out`` of its consumers, infinite where it reaches the path, which lies after the
    call, and 0 at a sink; joining nodes' compute and memory are left out). Returns the
    tensors with a consumer off the path (``esc_t``), their least cost (``esc``), their
    off-path consumers (``cons_off``, sparse ``[n, len(esc_t)]``) and count (``n_off``), and the
    tensors grouped by the part of the off-path nodes their consumers lie in (connected by
    edges between off-path nodes and by sharing a tensor): tensors of different parts
    share no tensor further on, so their costs add, and within a part only the largest
    counts."""
    n, T = g.num_nodes, g.num_tensors
    out = np.zeros(n)
    cons: list[list[int]] = [[] for _ in range(T)]
    for v, t in zip(g.edge_dst.tolist(), g.edge_tensor.tolist()):
        cons[t].append(v)
    made: list[list[int]] = [[] for _ in range(n)]
    for t, u in enumerate(g.tensor_src.tolist()):
        made[u].append(t)
    for w in range(n - 1, -1, -1):                       # nodes are topologically indexed
        if on_path[w]:
            continue
        worst = 0.0
        for t in made[w]:
            join = np.inf if any(on_path[x] for x in cons[t]) else max((out[x] for x in cons[t]), default=0.0)
            worst = max(worst, min(cost[t], join))
        out[w] = worst
    cons_off = np.zeros((n, T))
    esc = np.zeros(T)
    for t in range(T):
        off = [x for x in cons[t] if not on_path[x]]
        cons_off[off, t] = 1.0
        esc[t] = min(cost[t], min((out[x] for x in off), default=np.inf))
    n_off = cons_off.sum(axis=0)
    esc_ok = n_off > 0
    esc_t = np.flatnonzero(esc_ok)
    part = np.full(n, -1, dtype=np.int64)               # weakly connected parts of the off-path nodes
    adj: list[list[int]] = [[] for _ in range(n)]
    for u, v in zip(g.edge_src.tolist(), g.edge_dst.tolist()):
        if not on_path[u] and not on_path[v]:
            adj[u].append(v)
            adj[v].append(u)
    for t in range(T):                                  # one tensor's consumers: one part
        off = [x for x in cons[t] if not on_path[x]]
        for x in off[1:]:
            adj[off[0]].append(x)
            adj[x].append(off[0])
    for s in np.flatnonzero(~on_path).tolist():
        if part[s] < 0:
            part[s], stack = s, [s]
            while stack:
                for y in adj[stack.pop()]:
                    if part[y] < 0:
                        part[y] = s
                        stack.append(y)
    key = np.array([part[next(x for x in cons[t] if not on_path[x])] if esc_ok[t] else -1
                    for t in range(T)], dtype=np.int64)
    key = key[esc_t]
    comps = [np.flatnonzero(key == k) for k in np.unique(key)]
    return esc_t, esc[esc_t], sp.csr_matrix(cons_off[:, esc_t]), n_off[esc_t], comps


def path_bound(graph: CostGraph, paths: Iterable[list[int]] = ()) -> float:
    """The best bound of :func:`path_dp` over the paths of the module docstring."""
    g = graph
    if g.num_nodes == 0:
        return 0.0
    comp = np.where(np.isfinite(g.compute_s), g.compute_s, 0.0)
    is_cpu = cpu_devices(g)
    cands = list(paths)
    if is_cpu.any():
        cands.append(longest_path(g, comp[:, is_cpu].max(axis=1)))
    if (~is_cpu).any():
        cands.append(longest_path(g, comp[:, ~is_cpu].max(axis=1)))
    cands.append(longest_path(g, g.mem_bytes))
    cands.append(longest_path(g, np.zeros(g.num_nodes), tensor_cost(g)[g.edge_tensor]))
    reach = Reachability.of(np.stack([g.edge_src, g.edge_dst]), g.num_nodes)
    bound = max(path_dp(g, p, reach) for p in cands)
    q = _quotient(g, reach)
    return bound if q is None else max(bound, path_bound(q))


def _quotient(g: CostGraph, reach: Reachability) -> Optional[CostGraph]:
    """The graph with each block of co-located nodes (:func:`policies.solvers.blocks.blocks`)
    one node, or None where no block has two nodes. A block is contracted only where every
    node of it that receives from outside reaches every node that sends outside: then a
    path through the block is a path through its nodes, and the block on the CPUs takes at
    least its fastest node's time. On an accelerator it is one call's share, its nodes'
    compute summed, as they are; its memory is theirs. So every feasible placement is one
    of the quotient, no faster there, and the quotient's path bound bounds the graph's.
    What it adds: a node fed from off the path comes into a call with its whole block (a
    batch normalisation's zero-cost outputs bring the normalisation and what feeds it)."""
    of = blocks(g).of
    n = g.num_nodes
    size = np.bincount(of)
    if size.max(initial=0) < 2:
        return None
    cross = of[g.edge_src] != of[g.edge_dst]
    entries: dict[int, set] = {}
    exits: dict[int, set] = {}
    for u, v in zip(g.edge_src[cross].tolist(), g.edge_dst[cross].tolist()):
        exits.setdefault(int(of[u]), set()).add(u)
        entries.setdefault(int(of[v]), set()).add(v)
    whole = size > 1
    for k in np.flatnonzero(whole).tolist():
        out = np.array(sorted(exits.get(k, ())), dtype=np.int64)
        for x in entries.get(k, ()):
            below = reach.descendants(x)
            below[x] = True
            if not below[out].all():
                whole[k] = False
                break
    # node ids in the blocks' topological order, a block kept whole or its nodes apart
    key = np.where(whole[of], of * (n + 1), of * (n + 1) + 1 + np.arange(n))
    _, new = np.unique(key, return_inverse=True)
    N = int(new.max()) + 1
    is_cpu = cpu_devices(g)
    comp = np.empty((N, g.num_devices))
    for d in range(g.num_devices):
        col = g.compute_s[:, d]
        bad = np.zeros(N, dtype=bool)
        np.logical_or.at(bad, new, ~np.isfinite(col))
        if is_cpu[d]:
            t = np.full(N, np.inf)
            np.minimum.at(t, new, col)
        else:
            t = np.zeros(N)
            np.add.at(t, new, np.where(np.isfinite(col), col, 0.0))
        comp[:, d] = np.where(bad, np.inf, t)
    keep = new[g.edge_src] != new[g.edge_dst]
    e = np.unique(np.stack([g.edge_tensor[keep], new[g.edge_dst][keep]], axis=1), axis=0)
    return CostGraph(names=[f"block{i}" for i in range(N)], devices=list(g.devices),
                     compute_s=comp, tensor_src=new[g.tensor_src], tensor_bytes=g.tensor_bytes,
                     edge_src=new[g.tensor_src][e[:, 0]], edge_dst=e[:, 1], edge_tensor=e[:, 0],
                     tensor_transfer_s=tensor_cost(g),
                     mem_bytes=np.bincount(new, weights=g.mem_bytes, minlength=N),
                     mem_capacity=g.mem_capacity, name=g.name)
