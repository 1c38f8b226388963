"""The latency model of Tarnawski et al. (NeurIPS 2020): accelerators called once each.

The simulator's ``latency`` objective. It follows the latency IP of the authors'
repository (msr-fiddle/dnn-partitioning, ``latency-ip/lip.py``), whose value on a
contiguous split is the one ``latency-greedy/greedy.cpp`` computes
(``computeLatency``):

* CPU devices (those named ``CPU...``) are unlimited: a node on a CPU starts when
  all its predecessors have ended and runs for its compute time; no transfer is paid
  between CPU nodes, whichever CPU devices they are on.
* Each accelerator runs all its nodes as **one call**: the call starts when every
  node outside it that feeds it has ended, then pays the transfer of each such
  input tensor, the summed compute of its nodes and the transfer of each tensor it
  sends out (once per tensor, whatever the number of consumers), and all its nodes
  end together. So a CPU-accelerator edge costs its transfer once and an
  accelerator-accelerator edge twice (out of one call, into the next, through host
  memory).
* The graph contracted by accelerator (each accelerator's nodes one vertex, CPU nodes
  kept) must stay acyclic: a placement whose accelerator set is left and re-entered
  by a path cannot run as one call and is infeasible. The IP forbids it
  (its contiguity rows); ``greedy.cpp -computeLatency`` instead cuts such a set into
  several calls before scoring it, one call more each time a path leaves and re-enters
  the set.

A tensor's transfer time is the graph's ``tensor_transfer_s`` (the benchmark's
edge ``cost``); on a graph whose transfer times depend on the pair of devices, the
slowest link's. The value is the latest end of any node, in seconds.
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from hsdag_core.costgraph import CostGraph

__all__ = ["CallLatency", "cpu_devices", "tensor_cost"]


def cpu_devices(graph: CostGraph) -> np.ndarray:
    """``[D]`` True for the devices the model treats as unlimited CPUs (named ``CPU...``)."""
    return np.array([d.upper().startswith("CPU") for d in graph.devices], dtype=bool)


def tensor_cost(graph: CostGraph) -> np.ndarray:
    """``[T]`` the transfer time of each tensor between host memory and an accelerator."""
    if graph.tensor_transfer_s is not None:
        return np.asarray(graph.tensor_transfer_s, dtype=np.float64)
    D = graph.num_devices
    if D == 1:
        return np.zeros(graph.num_tensors)
    tr = graph.transfer_s()
    return tr[:, ~np.eye(D, dtype=bool)].max(axis=1)


class CallLatency:
    """Evaluates placements of one graph in the model of the module docstring."""

    def __init__(self, graph: CostGraph) -> None:
        self.graph = graph
        self.is_cpu = cpu_devices(graph)
        self.cost = tensor_cost(graph)
        n = graph.num_nodes
        self.preds: list[list[int]] = [[] for _ in range(n)]
        self.in_tensors: list[list[int]] = [[] for _ in range(n)]
        for u, v, t in zip(graph.edge_src.tolist(), graph.edge_dst.tolist(),
                           graph.edge_tensor.tolist()):
            self.preds[v].append(u)
            self.in_tensors[v].append(t)

    def components(self, placement: np.ndarray) -> np.ndarray:
        """``[n]`` the vertex of each node in the contracted graph: the node itself on a
        CPU, ``n + d`` on accelerator ``d``."""
        n = self.graph.num_nodes
        p = np.asarray(placement, dtype=np.int64)
        return np.where(self.is_cpu[p], np.arange(n), n + p)

    def order(self, comp: np.ndarray) -> Optional[list[int]]:
        """The contracted graph's vertices in a topological order, or None when it has a
        cycle."""
        g = self.graph
        cs, cd = comp[g.edge_src], comp[g.edge_dst]
        keep = cs != cd
        pairs = np.unique(np.stack([cs[keep], cd[keep]], axis=1), axis=0) if keep.any() \
            else np.empty((0, 2), dtype=np.int64)
        verts = np.unique(comp)
        indeg = dict.fromkeys(verts.tolist(), 0)
        succ: dict[int, list[int]] = {}
        for a, b in pairs.tolist():
            indeg[b] += 1
            succ.setdefault(a, []).append(b)
        stack = [v for v, k in indeg.items() if k == 0]
        out: list[int] = []
        while stack:
            v = stack.pop()
            out.append(v)
            for w in succ.get(v, ()):
                indeg[w] -= 1
                if indeg[w] == 0:
                    stack.append(w)
        return out if len(out) == len(indeg) else None

    def evaluate(self, placement: np.ndarray) -> tuple[float, Optional[str], dict[str, float],
                                                       np.ndarray]:
        """``(value, violation, breakdown, end)``: the latency in seconds (``inf`` when the
        contracted graph has a cycle), one sentence when it does, the parts of the value,
        and each node's end time."""
        g = self.graph
        n = g.num_nodes
        p = np.asarray(placement, dtype=np.int64)
        comp = self.components(p)
        topo = self.order(comp)
        if topo is None:
            bad = [g.devices[d] for d in np.unique(p) if not self.is_cpu[d]]
            return float("inf"), (
                "the graph contracted by accelerator has a cycle: a path leaves the nodes of "
                f"one of {', '.join(bad)} and comes back to them, so that accelerator cannot "
                "run its nodes as one call; give it a contiguous part of the graph"), {}, \
                np.full(n, np.inf)
        compute = g.compute_s[np.arange(n), p]
        members: dict[int, list[int]] = {}
        for i, c in enumerate(comp.tolist()):
            if c >= n:
                members.setdefault(c, []).append(i)
        endl = [0.0] * n
        cost = self.cost.tolist()
        preds, in_t = self.preds, self.in_tensors
        comm = 0.0
        calls: dict[str, float] = {}
        out_of = _tensors_out(g, comp)
        for v in topo:
            if v < n:
                endl[v] = compute[v] + max((endl[u] for u in preds[v]), default=0.0)
                continue
            nodes = members[v]
            start, tin = 0.0, set()
            for i in nodes:
                for u, t in zip(preds[i], in_t[i]):
                    if comp[u] != v:
                        start = max(start, endl[u])
                        tin.add(t)
            c_in = sum(cost[t] for t in tin)
            c_out = sum(cost[t] for t in out_of.get(v, ()))
            f = float(start + c_in + float(compute[nodes].sum()) + c_out)
            comm += c_in + c_out
            calls[f"call_{g.devices[v - n]}_s"] = f - start
            for i in nodes:
                endl[i] = f
        end = np.asarray(endl)
        bd = {"compute_s": float(compute.sum()), "transfer_s": comm,
              "calls": float(len(members)), **calls}
        return (float(end.max()) if n else 0.0), None, bd, end


def _tensors_out(g: CostGraph, comp: np.ndarray) -> dict[int, set[int]]:
    """Per accelerator vertex, the tensors it sends to another vertex."""
    n = g.num_nodes
    cs, cd = comp[g.edge_src], comp[g.edge_dst]
    sel = (cs >= n) & (cs != cd)
    out: dict[int, set[int]] = {}
    for c, t in zip(cs[sel].tolist(), g.edge_tensor[sel].tolist()):
        out.setdefault(c, set()).add(t)
    return out
