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
