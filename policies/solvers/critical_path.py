"""DOPPLER's critical-path placement (Yao et al., ICLR 2026): the heuristic its imitation
stage copies, ported from the repository xinyuyao/Doppler (``cp_utils.py``,
``env/env.py``, ``scheduler/rl_agent.py``: ``cp_node_selection``, ``cp_device_selection``).

An episode places one node at a time:

* a node's b-level is its compute time, plus, when it has successors, its output's
  transfer time and the largest b-level of its successors (``cp_utils.py``);
* the candidates are the nodes whose predecessors are all placed, in the order they
  became so (the roots first, in index order);
* the node chosen is one of highest b-level, ties broken at random;
* its device is one where it can start earliest, ties broken at random; a device's
  earliest start is the later of the device's end time and every input's end time (plus
  the input's transfer time when the input sits on another device); the node then ends
  its compute time after its start.

Two versions (``version=``):

``coded``
    as the repository runs it. Its node selection draws an index among the ``k`` nodes
    of highest b-level but returns the candidate at that index of the *whole* candidate
    list, so it picks one of the first ``k`` candidates (with one best node: the oldest
    candidate, first come first served). And a placed node's start is recorded as the
    summed compute of the nodes already on its device (the device state's first column),
    not its earliest start (the last column, which the device choice reads).
``intended``
    the node of highest b-level (ties at random), started at its earliest start.

:func:`solve_critical_path` runs ``episodes`` episodes (DOPPLER's configuration runs
50) from one seed and returns the placement the simulator scores best.
"""
from __future__ import annotations

import time
from typing import Optional

import numpy as np

from envs.simulator import Simulator
from hsdag_core.costgraph import CostGraph
from policies.solvers.bounds import lower_bound
from policies.solvers.result import SolveResult, finish

__all__ = ["VERSIONS", "b_levels", "critical_path_episode", "solve_critical_path"]

VERSIONS = ("coded", "intended")


def _node_costs(graph: CostGraph) -> tuple[np.ndarray, np.ndarray]:
    """``(comp, comm)`` per node: the mean finite compute time over devices, and the
    largest transfer time of the node's tensors between two distinct devices."""
    g = graph
    finite = np.where(np.isinf(g.compute_s), np.nan, g.compute_s)
    with np.errstate(all="ignore"):
        comp = np.nan_to_num(np.nanmean(finite, axis=1), nan=0.0)
    comm = np.zeros(g.num_nodes)
    if g.num_devices > 1 and g.num_tensors:
        tr = g.transfer_s()
        off = ~np.eye(g.num_devices, dtype=bool)
        np.maximum.at(comm, g.tensor_src, tr[:, off].max(axis=1))
    return comp, comm


def b_levels(graph: CostGraph) -> np.ndarray:
    """``[n]`` DOPPLER's b-level of every node (module docstring)."""
    comp, comm = _node_costs(graph)
    b = comp.copy()
    for i in range(graph.num_nodes - 1, -1, -1):
        kids = graph.edge_dst[graph.edge_src == i]
        if kids.size:
            b[i] = comp[i] + comm[i] + b[kids].max()
    return b


def critical_path_episode(graph: CostGraph, rng: np.random.Generator,
                          version: str = "intended") -> np.ndarray:
    """One episode's placement (module docstring); ``rng`` breaks the ties."""
    if version not in VERSIONS:
        raise ValueError(f"unknown critical-path version {version!r}; choose {' or '.join(VERSIONS)}")
    g = graph
    n, D = g.num_nodes, g.num_devices
    comp, comm = _node_costs(g)
    b = b_levels(g)
    preds = [sorted(set(g.edge_src[g.edge_dst == i].tolist())) for i in range(n)]
    succs: list[list[int]] = [[] for _ in range(n)]
    for u, v in zip(g.edge_src.tolist(), g.edge_dst.tolist()):
        if v not in succs[u]:
            succs[u].append(v)
    runs = np.isfinite(g.compute_s)
    missing = [len(p) for p in preds]
    legal = [i for i in range(n) if missing[i] == 0]
    where = np.full(n, -1, dtype=np.int64)
    end = np.zeros(n)
    device_end = np.zeros(D)
    device_work = np.zeros(D)
    for _ in range(n):
        scores = b[legal]
        ties = np.flatnonzero(scores == scores.max())
        k = int(rng.integers(ties.size))
        node = legal[k] if version == "coded" else legal[int(ties[k])]
        earliest = device_end.copy()
        for u in preds[node]:
            arrive = np.full(D, end[u] + comm[u])
            arrive[where[u]] = end[u]
            np.maximum(earliest, arrive, out=earliest)
        if not preds[node]:
            np.maximum(earliest, 0.0, out=earliest)
        earliest[~runs[node]] = np.inf
        best = np.flatnonzero(earliest == earliest.min())
        d = int(best[int(rng.integers(best.size))])
        start = device_work[d] if version == "coded" else earliest[d]
        where[node] = d
        end[node] = start + comp[node]
        device_end[d] = end[node]
        device_work[d] += comp[node]
        legal.remove(node)
        for v in succs[node]:
            missing[v] -= 1
            if missing[v] == 0:
                legal.append(v)
    return where


def solve_critical_path(graph: CostGraph, objective: str = "parallel", *,
                        time_limit: Optional[float] = None, episodes: int = 50, seed: int = 0,
                        version: str = "intended") -> SolveResult:
    """The best of ``episodes`` critical-path episodes under ``objective`` (module
    docstring); stops early when ``time_limit`` seconds have passed after an episode."""
    t0 = time.perf_counter()
    if episodes < 1:
        raise ValueError("episodes must be at least 1")
    rng = np.random.default_rng(seed)
    sim = Simulator(graph)
    best, best_value, run = None, np.inf, 0
    for run in range(1, episodes + 1):
        p = critical_path_episode(graph, rng, version)
        res = sim.evaluate(p, objective)
        value = res.value if res.feasible else np.inf
        if best is None or value < best_value:
            best, best_value = p, value
        if time_limit is not None and time.perf_counter() - t0 > time_limit:
            break
    name = "critical-path" if version == "intended" else "critical-path-coded"
    return finish(graph, objective, name, best, t0,
                  bound=lower_bound(graph, objective),
                  status=f"DOPPLER's critical path ({version}), best of {run} episodes",
                  info={"episodes": run, "version": version})
