"""Cheap lower bounds on each simulator objective, valid for every placement.

With ``m_i = min_d compute_s[i, d]`` (each node on its fastest device) and
``D`` devices:

* sequential: ``sum_i m_i`` (transfers and boundaries only add);
* throughput: ``max(max_i m_i, sum_i m_i / D)`` (the busiest device carries at
  least the average load and at least its largest node);
* parallel: ``max(H, sum_i m_i / D)`` where ``H`` is the largest head plus tail of
  a node (:func:`parallel_levels`: a node's predecessors either send their tensors
  or share its device and run one after another) and ``D`` devices cannot finish
  before total work / ``D``; ``H`` is at least the critical path ``CP``, the longest
  path with node weights ``m_i`` and free transfers;
* latency: ``CP`` (a CPU node ends at least its compute after its predecessors, and an
  accelerator's call at least the compute of all its nodes after its inputs).

Memory, support and co-location are relaxed, so these bound the constrained
optimum too.
"""
from __future__ import annotations

import numpy as np

from hsdag_core.costgraph import CostGraph

__all__ = ["critical_path_s", "lower_bound", "parallel_levels"]

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


def _one_machine(release: np.ndarray, dur: np.ndarray) -> float:
    """The earliest time one device can finish jobs with these release times and
    durations (preemption allowed, so a bound): the largest release plus the work
    released at or after it."""
    o = np.argsort(release, kind="stable")
    return float((release[o] + np.cumsum(dur[o][::-1])[::-1]).max())


def _heads(n: int, m: np.ndarray, preds: list[dict[int, float]], order) -> np.ndarray:
    """Each node's earliest start when every predecessor ``u`` either sends its tensor
    (``preds[v][u]``: its cheapest transfer) or runs on the node's device; those that
    share it run one after another there, each no earlier than its own earliest start.
    Keeping the predecessors whose tensors would arrive last is the cheapest choice for
    each number kept, so trying each number gives the least start over every choice."""
    start = np.zeros(n)
    for v in order:
        if not preds[v]:
            continue
        us = np.fromiter(preds[v], dtype=np.int64)
        arrive = start[us] + m[us] + np.fromiter(preds[v].values(), dtype=np.float64)
        o = np.argsort(-arrive, kind="stable")
        us, arrive = us[o], arrive[o]
        best = arrive[0]
        for k in range(1, us.size + 1):
            local = _one_machine(start[us[:k]], m[us[:k]])
            best = min(best, max(arrive[k] if k < us.size else 0.0, local))
        start[v] = best
    return start


def parallel_levels(graph: CostGraph) -> tuple[np.ndarray, np.ndarray]:
    """``(head, tail)``: a lower bound on each node's start, and on the time from its
    start to the end of the schedule (its own compute included), under the parallel
    objective (one node at a time per device, a tensor between two devices at least its
    cheapest transfer after its producer ends). The tail is the head of the reversed
    graph plus the node's compute, so ``head + tail`` bounds the makespan through each
    node. Memory, support and co-location are relaxed."""
    g = graph
    n = g.num_nodes
    m = np.min(np.where(np.isfinite(g.compute_s), g.compute_s, np.inf), axis=1)
    if g.num_devices > 1 and g.num_tensors:
        c = g.transfer_s()[:, ~np.eye(g.num_devices, dtype=bool)].min(axis=1)
    else:                                            # one device: nothing is sent
        c = np.full(g.num_tensors, np.inf)
    preds: list[dict[int, float]] = [{} for _ in range(n)]
    succs: list[dict[int, float]] = [{} for _ in range(n)]
    for u, v, t in zip(g.edge_src.tolist(), g.edge_dst.tolist(), g.edge_tensor.tolist()):
        preds[v][u] = min(preds[v].get(u, np.inf), float(c[t]))
        succs[u][v] = min(succs[u].get(v, np.inf), float(c[t]))
    head = _heads(n, m, preds, range(n))             # nodes are topologically indexed
    tail = _heads(n, m, succs, range(n - 1, -1, -1)) + m
    return head, tail


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
        head, tail = parallel_levels(graph)
        return max(float((head + tail).max(initial=0.0)), total / D)
    if objective == "latency":
        return critical_path_s(graph)
    raise ValueError(f"unknown objective {objective!r}; choose sequential, parallel, "
                     "throughput or latency")
