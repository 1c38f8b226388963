"""Whether a placement fits the devices, and making it fit, from the costs alone.

A placement is *feasible* when every node sits on a device that can run it
(finite compute time), no device holds more bytes than its memory, and the
nodes of a co-location class share a device. All three are known from the
profile's :class:`~hsdag_core.costgraph.CostGraph`, without measuring.

:func:`repair` turns an infeasible placement into a feasible one close to it
(the rule every method's measured proposals, zero-shot placements and first
fine-tuning placement follow):

1. a co-location class goes, whole, to the device holding most of its bytes
   (its first node's device when it holds none);
2. a node (class) on a device that cannot run it goes to the device where it
   runs fastest;
3. when devices hold more bytes than their memory, some nodes (classes) on them
   move to other devices: the set of moves that costs least in all, with every
   device within its memory afterwards. A move costs the node's compute time
   there minus here (nothing when that saves time), and the result costs
   ``boundary_s`` per stage boundary (two consecutive nodes of the topological
   order on different devices) next to a moved node and the transfer time of
   every tensor that crosses to a device (once per tensor and device, as the
   simulator counts it) from or to a moved node. This is a small 0/1 program
   (a knapsack cover when one device overflows), solved exactly by HiGHS. A
   node holding no bytes moves only where that removes boundaries or transfers
   (one left alone between nodes that moved would be a stage of its own).

An exact set matters: a rule that moves one node at a time (the cheapest extra
time per byte freed) cannot *exchange*. Moving a large node onto a full
accelerator makes it evict that node again (or one as costly) rather than the
two smaller ones whose leaving costs less in all, so a policy proposing the
large node never sees the placement it points at. That greedy rule remains as
the fallback when HiGHS finds no set within its time limit.

Transfers matter as much: blind to them, a repair sends a squeeze-and-excitation
pool or a few zero-byte Gathers alone to the CPU (cheap to run there, dear to
feed). docs/results/design-choices.md gives the figures for both choices.
With more than two devices a moved source's transfer is priced from the
slowest other device (exact for two).

It returns None when no set of moves fits, which happens only when the devices
together cannot hold the graph's bytes or a node is larger than every device
with room. The rule is not a search for the fastest feasible placement: a move
that saves time counts as free rather than as a gain, and it moves only nodes
that sit on a device that overflows.
"""
from __future__ import annotations

from typing import Optional, Sequence

import numpy as np

from hsdag_core.costgraph import CostGraph

__all__ = ["violation", "feasible", "repair"]


def violation(graph: CostGraph, placement: Sequence[int]) -> Optional[str]:
    """One sentence on the first limit ``placement`` breaks, or None."""
    g = graph
    p = np.asarray(placement, dtype=np.int64)
    cost = g.compute_s[np.arange(g.num_nodes), p]
    bad = np.flatnonzero(np.isinf(cost))
    if bad.size:
        i = int(bad[0])
        return (f"node {g.names[i]!r} cannot run on {g.devices[int(p[i])]} "
                f"({bad.size} node(s) on a device that does not support them)")
    use = g.memory_use(p)
    over = np.flatnonzero(use > g.mem_capacity)
    if over.size:
        d = int(over[0])
        return (f"device {g.devices[d]} holds {use[d]:.4g} bytes, over its memory "
                f"of {g.mem_capacity[d]:.4g} bytes")
    if not g.colocation_ok(p):
        return "nodes of one co-location class are on different devices"
    return None


def feasible(graph: CostGraph, placement: Sequence[int]) -> bool:
    return violation(graph, placement) is None


def _units(graph: CostGraph) -> np.ndarray:
    """``[n]`` unit of each node: its co-location class, or a unit of its own."""
    n = graph.num_nodes
    if graph.colocate is None:
        return np.arange(n)
    cls = graph.colocate
    _, inv = np.unique(np.where(cls >= 0, cls, -1 - np.arange(n)), return_inverse=True)
    return inv.reshape(-1)


def repair(graph: CostGraph, placement: Sequence[int], time_limit: float = 2.0) -> Optional[np.ndarray]:
    """``placement`` made feasible by the module's rule (a copy; the same values when
    it is feasible already), or None when the rule finds no feasible one.
    ``time_limit``: seconds HiGHS may search for the cheapest set of moves (its best
    set so far is taken when it stops, and the per-byte rule when it has none)."""
    g = graph
    p = np.array(placement, dtype=np.int64).reshape(-1)[: g.num_nodes]
    if feasible(g, p):
        return p
    D = g.num_devices
    unit = _units(g)
    U = int(unit.max()) + 1
    # per unit: compute time on each device, bytes, and its device
    comp = np.zeros((U, D))
    np.add.at(comp, unit, g.compute_s)
    mem = np.bincount(unit, weights=g.mem_bytes, minlength=U)
    held = np.zeros((U, D))
    np.add.at(held, (unit, p), g.mem_bytes)
    first = np.full(U, -1, dtype=np.int64)
    first[unit[::-1]] = p[::-1]
    dev = np.where(held.max(axis=1) > 0, held.argmax(axis=1), first)
    runs = np.isfinite(comp)
    if not runs.any(axis=1).all():
        return None  # a node runs nowhere
    stuck = ~runs[np.arange(U), dev]
    dev[stuck] = np.where(runs[stuck], comp[stuck], np.inf).argmin(axis=1)
    use = np.bincount(dev, weights=mem, minlength=D)
    cap = g.mem_capacity
    if (use > cap * (1 + 1e-12)).any():
        moved = _cover(g, unit, comp, mem, runs, dev, use, time_limit)
        if moved is None:
            moved = _greedy(g, unit, comp, mem, runs, dev, use)
        if moved is None:
            return None
        dev = moved
    out = dev[unit]
    return out if feasible(g, out) else None


def _extra(g: CostGraph, unit: np.ndarray, comp: np.ndarray, dev: np.ndarray,
           cand: np.ndarray) -> np.ndarray:
    """``[len(cand), D]`` extra time of moving each candidate unit alone to each device:
    its compute time there minus here plus ``boundary_s`` per stage boundary the move
    adds (minus per boundary it removes) with its neighbours in the topological order."""
    extra = comp[cand] - comp[cand, dev[cand]][:, None]
    if g.boundary_s > 0:
        U, D = comp.shape
        q = dev[unit]
        prev = np.r_[-1, q[:-1]]
        nxt = np.r_[q[1:], -1]
        now = ((prev >= 0) & (prev != q)).astype(float) + ((nxt >= 0) & (nxt != q))
        nodes_b = np.zeros((U, D))
        for t in range(D):
            then = ((prev >= 0) & (prev != t)).astype(float) + ((nxt >= 0) & (nxt != t))
            np.add.at(nodes_b[:, t], unit, then - now)
        extra = extra + g.boundary_s * nodes_b[cand]
    return extra


def _greedy(g, unit, comp, mem, runs, dev, use) -> Optional[np.ndarray]:
    """The per-byte rule: one unit at a time, the cheapest extra time per byte
    freed, boundaries priced after each move (the fallback of :func:`_cover`)."""
    dev, use, cap = dev.copy(), use.copy(), g.mem_capacity
    while True:
        over = np.flatnonzero(use > cap * (1 + 1e-12))
        if not over.size:
            return dev
        d = int(over[0])
        cand = np.flatnonzero((dev == d) & (mem > 0))
        if not cand.size:
            return None
        extra = _extra(g, unit, comp, dev, cand)
        room = cap - use
        fits = runs[cand] & (mem[cand][:, None] <= room[None, :] * (1 + 1e-12))
        fits[:, d] = False
        if not fits.any():
            return None
        score = np.where(fits, extra / mem[cand][:, None], np.inf)
        k, t = np.unravel_index(int(np.argmin(score)), score.shape)
        u = int(cand[k])
        dev[u] = int(t)
        use[d] -= mem[u]
        use[t] += mem[u]


def _crossing_pairs(g: CostGraph, unit: np.ndarray, where: np.ndarray
                    ) -> dict[tuple[int, int], list[int]]:
    """(tensor, device) -> the consumers of the tensor, for every tensor whose source
    or a consumer (of another unit) may move, and every device."""
    movable = where[unit] >= 0
    e = np.flatnonzero(unit[g.edge_src] != unit[g.edge_dst])
    e = e[np.argsort(g.edge_tensor[e], kind="stable")]  # edges grouped by tensor
    tensors, first = np.unique(g.edge_tensor[e], return_index=True)
    out: dict[tuple[int, int], list[int]] = {}
    for tensor, cons in zip(tensors.tolist(), np.split(g.edge_dst[e], first[1:])):
        if movable[g.tensor_src[tensor]] or movable[cons].any():
            consumers = np.unique(cons).tolist()
            for d in range(g.num_devices):
                out[(tensor, d)] = consumers
    return out


def _transfer_to(g: CostGraph, transfer: np.ndarray, tensor: int, src_dev: int, d: int) -> float:
    """Time to send ``tensor`` to device ``d``: from its source's device, or (when the
    source sits on ``d`` now and may move) from the slowest other device."""
    if src_dev != d:
        return float(transfer[tensor, src_dev, d])
    others = [s for s in range(g.num_devices) if s != d]
    return float(max(transfer[tensor, s, d] for s in others)) if others else 0.0


def _cover(g, unit, comp, mem, runs, dev, use, time_limit: float = 2.0) -> Optional[np.ndarray]:
    """The exact rule: the moves off the overflowing devices that cost least in all
    (compute time added, a move that saves time counting nothing, plus
    ``boundary_s`` per stage boundary of the result between nodes of which one
    moved, plus the transfer time of each (tensor, device) crossing of the result
    with a moved source or consumer), with every device within its memory
    afterwards; a 0/1 program solved by HiGHS (``scipy.optimize.milp``). Nodes
    holding no bytes move only where that removes boundaries or transfers. None
    when it finds no such set within ``time_limit`` seconds."""
    from scipy.optimize import Bounds, LinearConstraint, milp
    from scipy.sparse import coo_matrix

    cap, D = g.mem_capacity, comp.shape[1]
    transfer = g.transfer_s()
    over = use > cap * (1 + 1e-12)
    cand = np.flatnonzero(over[dev])  # a node holding no bytes may still save boundaries or transfers
    ok = runs[cand] & (mem[cand][:, None] <= cap[None, :] * (1 + 1e-12))
    ok[np.arange(cand.size), dev[cand]] = False
    k, t = np.nonzero(ok)  # one 0/1 variable x per allowed (unit, target device)
    if not k.size:
        return None
    col = np.full((cand.size, D), -1)
    col[k, t] = np.arange(k.size)
    where = np.full(comp.shape[0], -1)
    where[cand] = np.arange(cand.size)
    # stage boundaries: one variable b >= z_i,d - z_j,d per device d, for each pair of
    # consecutive nodes i, j of different units of which one may move; z_i,d is 1 when
    # node i ends on d: x of (its unit, d), or 1 - its unit's x's for the device it is on
    order_i = np.arange(g.num_nodes - 1)
    order_i = order_i[(unit[:-1] != unit[1:]) & ((where[unit[:-1]] >= 0) | (where[unit[1:]] >= 0))]
    if g.boundary_s <= 0:
        order_i = order_i[:0]
    nb = order_i.size
    rows, cols, vals, ub = [], [], [], []

    def z(node, d, sign, row):  # adds sign * z_node,d to row; returns its constant part
        c = where[unit[node]]
        if c < 0:
            return sign * float(dev[unit[node]] == d)
        if dev[cand[c]] == d:
            for j in col[c][col[c] >= 0]:
                rows.append(row), cols.append(j), vals.append(-sign)
            return sign
        if col[c, d] >= 0:
            rows.append(row), cols.append(col[c, d]), vals.append(sign)
        return 0.0

    r = 0
    for p, i in enumerate(order_i):
        for d in range(D):
            const = z(i, d, 1.0, r) + z(i + 1, d, -1.0, r)
            rows.append(r), cols.append(k.size + p), vals.append(-1.0)
            ub.append(-const)
            r += 1
    # transfers: one variable y >= z_j,d - z_s,d per (tensor, device d), for each consumer j
    # of a tensor of node s where s or a consumer may move (a tensor crosses to d once)
    pairs, ycost = _crossing_pairs(g, unit, where), []
    for (tensor, d), consumers in pairs.items():
        src = int(g.tensor_src[tensor])
        col_y = k.size + nb + len(ycost)
        for j in consumers:
            const = z(j, d, 1.0, r) + z(src, d, -1.0, r)
            rows.append(r), cols.append(col_y), vals.append(-1.0)
            ub.append(-const)
            r += 1
        ycost.append(_transfer_to(g, transfer, tensor, dev[unit[src]], d))
    ny = len(ycost)
    extra = comp[cand[k], t] - comp[cand[k], dev[cand[k]]]
    pos = extra[extra > 0]
    tiny = 1e-3 * (pos.mean() if pos.size else 1.0)
    cost = np.r_[np.maximum(extra, 0.0) + tiny, np.full(nb, g.boundary_s), np.asarray(ycost, float)]
    cost = cost / cost.max()  # HiGHS is best with numbers near 1: scale time and bytes
    scale = mem[cand].max() if mem[cand].max() > 0 else 1.0
    w = mem[cand[k]] / scale
    # per device with finite memory: bytes arriving minus bytes leaving <= its room
    rows_d = np.flatnonzero(np.isfinite(cap))
    mr, mc, mv = [], [], []
    for a, d in enumerate(rows_d):
        into, out = np.flatnonzero(t == d), np.flatnonzero(dev[cand[k]] == d)
        mr += [np.full(into.size + out.size, a)]
        mc += [into, out]
        mv += [w[into], -w[out]]
    n_var = k.size + nb + ny
    A_mem = coo_matrix((np.concatenate(mv), (np.concatenate(mr), np.concatenate(mc))),
                       shape=(rows_d.size, n_var))
    A_one = coo_matrix((np.ones(k.size), (k, np.arange(k.size))), shape=(cand.size, n_var))
    constraints = [LinearConstraint(A_mem, -np.inf, (cap - use)[rows_d] / scale),
                   LinearConstraint(A_one, 0, 1)]
    if r:
        A_b = coo_matrix((vals, (rows, cols)), shape=(r, n_var))
        constraints.append(LinearConstraint(A_b, -np.inf, np.asarray(ub)))
    # presolve off: with it HiGHS prints a stray debug line on about 1% of these
    res = milp(cost, integrality=np.r_[np.ones(k.size), np.zeros(nb + ny)], bounds=Bounds(0, 1),
               constraints=constraints, options={"time_limit": time_limit, "presolve": False})
    if res.x is None:
        return None
    out = dev.copy()
    chosen = res.x[: k.size] > 0.5
    out[cand[k[chosen]]] = t[chosen]
    new_use = np.bincount(out, weights=mem, minlength=D)
    # HiGHS allows rows 1e-6 over; a set that overflows by as little is not taken
    return out if (new_use <= cap).all() else None
