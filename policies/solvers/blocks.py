"""The blocks of a graph: the units a placement moves under the ``latency`` objective
(:mod:`envs.call_latency`), after ``makeBlocks`` of Tarnawski et al.'s
``latency-greedy/greedy.cpp`` (msr-fiddle/dnn-partitioning): the co-location classes
(nodes without one are their own class), merged where two classes reach each other (such
classes must share a machine, or the graph contracted by accelerator would have a
cycle), in a topological order of the contracted graph. The heuristics
(:mod:`policies.solvers.latency`, :mod:`policies.solvers.segments`), the latency IP and
the path bound's quotient (:mod:`policies.solvers.latency_bound`) all work on them.
"""
from __future__ import annotations

from typing import NamedTuple

import networkx as nx
import numpy as np

from hsdag_core.costgraph import CostGraph
from policies.solvers.result import colocation_groups

__all__ = ["Blocks", "blocks"]


class Blocks(NamedTuple):
    """``of[i]``: node ``i``'s block; ``order``: blocks in a topological order;
    ``mem``: each block's memory; ``edges``: ``[E, 2]`` distinct block edges."""

    of: np.ndarray
    order: list[int]
    mem: np.ndarray
    edges: np.ndarray


def blocks(graph: CostGraph, late: bool = False) -> Blocks:
    """The blocks of the module docstring, in the topological order that takes the
    lowest node index first, or (``late``) the block with the fewest edges left to a
    sink first, so that a source such as a weight comes just before its consumer."""
    grp = colocation_groups(graph)
    h = nx.DiGraph()
    h.add_nodes_from(range(int(grp.max()) + 1 if grp.size else 0))
    h.add_edges_from((a, b) for a, b in zip(grp[graph.edge_src].tolist(), grp[graph.edge_dst].tolist())
                     if a != b)
    cond = nx.condensation(h)
    first = {c: min(cond.nodes[c]["members"]) for c in cond.nodes}
    if late:
        height: dict[int, int] = {}
        for c in reversed(list(nx.topological_sort(cond))):
            height[c] = max((height[s] + 1 for s in cond.successors(c)), default=0)
        key = lambda c: (-height[c], first[c])
    else:
        key = lambda c: first[c]
    order_c = list(nx.lexicographical_topological_sort(cond, key=key))
    rank = {c: k for k, c in enumerate(order_c)}
    of = np.array([rank[cond.graph["mapping"][x]] for x in grp], dtype=np.int64)
    mem = np.bincount(of, weights=graph.mem_bytes, minlength=len(order_c))
    e = np.stack([of[graph.edge_src], of[graph.edge_dst]], axis=1)
    e = np.unique(e[e[:, 0] != e[:, 1]], axis=0) if e.size else np.empty((0, 2), dtype=np.int64)
    return Blocks(of, list(range(len(order_c))), mem, e)
