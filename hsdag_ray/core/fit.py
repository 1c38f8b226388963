"""Whether a placement fits the devices, and making it fit, from the costs alone.

A placement is *feasible* when every node sits on a device that can run it
(finite compute time), no device holds more bytes than its memory, and the
nodes of a co-location class share a device. All three are known from the
profile's :class:`~hsdag_ray.core.costgraph.CostGraph`, without measuring.

:func:`repair` turns an infeasible placement into a feasible one close to it
(the rule every method's zero-shot and first fine-tuning placement follows):

1. a co-location class goes, whole, to the device holding most of its bytes
   (its first node's device when it holds none);
2. a node (class) on a device that cannot run it goes to the device where it
   runs fastest;
3. while a device holds more bytes than its memory, one node (class) on it
   moves to another device with room for it: the one whose move costs the
   least extra time per byte freed, the extra time being its compute time
   there minus here plus ``boundary_s`` per stage boundary the move adds
   (minus per boundary it removes) between it and its neighbours in the
   topological order; nodes holding no bytes never move (moving them frees
   nothing).

It returns None when step 3 finds no node that fits anywhere, which happens
only when the devices together cannot hold the graph's bytes or a node is
larger than every device with room. The rule is a greedy one: it neither
looks for the fastest feasible placement nor counts transfers.
"""
from __future__ import annotations

from typing import Optional, Sequence

import numpy as np

from hsdag_ray.core.costgraph import CostGraph

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


def repair(graph: CostGraph, placement: Sequence[int]) -> Optional[np.ndarray]:
    """``placement`` made feasible by the module's rule (a copy; the same values when
    it is feasible already), or None when the rule finds no feasible one."""
    g = graph
    p = np.array(placement, dtype=np.int64).reshape(-1)[: g.num_nodes]
    if feasible(g, p):
        return p
    n, D = g.num_nodes, g.num_devices
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
    while True:
        over = np.flatnonzero(use > cap * (1 + 1e-12))
        if not over.size:
            break
        d = int(over[0])
        cand = np.flatnonzero((dev == d) & (mem > 0))
        if not cand.size:
            return None
        q = dev[unit]
        prev = np.r_[-1, q[:-1]]
        nxt = np.r_[q[1:], -1]
        # extra time of moving each candidate to each device: compute + boundaries
        extra = comp[cand] - comp[cand, d][:, None]
        if g.boundary_s > 0:
            # boundaries each node has with its neighbours now, and if its unit sat on t
            now = ((prev >= 0) & (prev != q)).astype(float) + ((nxt >= 0) & (nxt != q))
            nodes_b = np.zeros((U, D))
            for t in range(D):
                then = ((prev >= 0) & (prev != t)).astype(float) + ((nxt >= 0) & (nxt != t))
                np.add.at(nodes_b[:, t], unit, then - now)
            extra = extra + g.boundary_s * nodes_b[cand]
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
    out = dev[unit]
    return out if feasible(g, out) else None
