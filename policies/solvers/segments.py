"""The sequential objective's segments: the best split of a topological order into
consecutive segments, one device each, then single-node moves.

The units are the blocks of :func:`policies.solvers.latency.blocks` (co-location classes,
merged where two reach each other), in a topological order. A dynamic program cuts that
order into consecutive segments; a segment on a device pays its nodes' compute there and
each tensor that an earlier segment sends into it (once per segment, at its slowest link),
and must fit the device's memory. Interchangeable devices are taken by class
(:func:`policies.solvers.result.device_classes`; the split itself is
:func:`policies.solvers.split.best_split`): a class of ``k`` devices with a memory
limit gives at most ``k`` segments, each on a device of its own, while a device of
unlimited memory takes any number. The segment costs are exact when every segment has a
device of its own and over-count a tensor sent twice to one device otherwise; the
simulator scores the result, and single-node moves
(:func:`policies.solvers.polish.polish`) then refine it in what is left of the time.

On a chain of layers with large activations, where a cut costs more than most nodes'
compute (the dnn-partitioning layer graphs), this is where a good split starts: the
cuts fall where the tensors are small, and memory-sized segments fill the accelerators.
"""
from __future__ import annotations

import time
from typing import Optional

import numpy as np

from envs.call_latency import tensor_cost
from envs.simulator import Simulator
from hsdag_core.costgraph import CostGraph
from policies.solvers.bounds import lower_bound
from policies.solvers.latency import Blocks, blocks
from policies.solvers.partition_bound import STOP_GAP, partition_bound
from policies.solvers.path_bound import PATH_BOUND_FROM_S, sequential_bound
from policies.solvers.polish import polish
from policies.solvers.result import SolveResult, device_classes, finish
from policies.solvers.split import best_split

__all__ = ["segments_placement", "solve_segments", "MAX_STATES"]

MAX_STATES = 256
"""The dynamic program's states per position (the product over limited classes of their
device count plus one); beyond it the limited classes keep only their first devices."""

POLISH_SHARE = 0.5
"""Share of ``time_limit`` the single-node moves may take after the dynamic program."""


def _inbound(graph: CostGraph, b: Blocks) -> np.ndarray:
    """``[B+1, B+1]``: the transfer time of the tensors made before block ``i`` and used in
    blocks ``i..j-1``, each counted once."""
    nb = len(b.order)
    cost = tensor_cost(graph)
    first: dict[tuple[int, int], None] = {}
    for u, v, t in zip(b.of[graph.edge_src].tolist(), b.of[graph.edge_dst].tolist(),
                       graph.edge_tensor.tolist()):
        if u != v:
            first[(t, v)] = None
    prod = b.of[graph.tensor_src]
    users: list[list[int]] = [[] for _ in range(graph.num_tensors)]
    for t, v in first:
        users[t].append(v)
    Z = np.zeros((nb + 1, nb + 2))
    for t, us in enumerate(users):
        if not us:
            continue
        us = np.unique(us)
        # tensor t enters a segment that starts at i (after its producer) iff its first
        # user at or after i lies before the segment's end
        i = np.arange(int(prod[t]) + 1, int(us[-1]) + 1)
        np.add.at(Z, (i, us[np.searchsorted(us, i)] + 1), cost[t])
    return np.cumsum(Z, axis=1)[:, :nb + 1]


def segments_placement(graph: CostGraph) -> Optional[np.ndarray]:
    """The dynamic program's placement (module docstring), or None where nothing fits."""
    g = graph
    b = blocks(g)
    nb = len(b.order)
    classes = device_classes(g)
    lim = [ci for ci, c in enumerate(classes) if np.isfinite(g.mem_capacity[c[0]])]
    while lim and np.prod([len(classes[ci]) + 1 for ci in lim]) > MAX_STATES:
        classes[max(lim, key=lambda ci: len(classes[ci]))].pop()
    comp = np.where(np.isfinite(g.compute_s), g.compute_s, np.inf)
    inbound = _inbound(g, b)
    mem = np.concatenate([[0.0], np.cumsum(b.mem)])
    seg = []   # [B+1, B+1] per class
    for c in classes:
        w = np.concatenate([[0.0], np.cumsum(np.bincount(b.of, weights=comp[:, c[0]], minlength=nb))])
        cost = w[None, :] - w[:, None] + inbound
        cost = np.where(np.isnan(cost), np.inf, cost)
        fits = (mem[None, :] - mem[:, None]) <= g.mem_capacity[c[0]] * (1 + 1e-12)
        i, j = np.indices(cost.shape)
        seg.append(np.where(fits & (j > i), cost, np.inf))
    on = best_split(seg, classes, [ci in lim for ci in range(len(classes))])
    return None if on is None else on[b.of]


def solve_segments(graph: CostGraph, objective: str = "sequential", *,
                   time_limit: Optional[float] = None, path_bound: bool = True) -> SolveResult:
    """The dynamic program's placement, refined by single-node moves for
    ``POLISH_SHARE`` of ``time_limit`` (until a local optimum where there is none).

    Its bound is :func:`policies.solvers.path_bound.sequential_bound` where memory binds
    and the limit is at least ``PATH_BOUND_FROM_S`` (or none), else the sum of fastest
    times; the sequential MILP's start (``path_bound=False``) leaves it to the MILP. Given
    such a limit (not none), what is left of it goes to the set partitioning bound
    (:func:`policies.solvers.partition_bound.partition_bound`, from the placement's own
    sets), which stops once it meets the placement's value; the restricted master
    heuristic run with it (:mod:`policies.solvers.master_heuristic`) replaces the
    placement by any better one it finds."""
    t0 = time.perf_counter()
    if objective != "sequential":
        raise ValueError(f"segments solves the sequential objective, not {objective!r}")
    p = segments_placement(graph)
    info: dict = {}
    value = np.inf
    if p is not None:
        sim = Simulator(graph)
        info["segments_s"] = float(sim.evaluate(p, objective).value)
        deadline = np.inf if time_limit is None else t0 + POLISH_SHARE * time_limit
        p, value, info["moves"] = polish(sim, p, objective, deadline)
    bound = lower_bound(graph, objective)
    if path_bound and np.isfinite(graph.mem_capacity).any() and \
            (time_limit is None or time_limit >= PATH_BOUND_FROM_S):
        bound = max(bound, sequential_bound(graph))
        left = np.inf if time_limit is None else time_limit - (time.perf_counter() - t0)
        if np.isfinite(left) and left > 1.0 and np.isfinite(value) and \
                bound < value * (1 - STOP_GAP):
            better = []
            part, part_info = partition_bound(graph, left, p, stop_at=value,
                                              better=lambda q, v: better.append(q))
            info.update(part_info)
            bound = max(bound, part)
            if better:
                p = better[-1]
    return finish(graph, objective, "segments", p, t0, bound=bound,
                  status="" if p is not None else "no split of the blocks fits the devices",
                  info=info)
