"""Heuristics for the ``latency`` objective (:mod:`envs.call_latency`).

* :func:`blocks` (:mod:`policies.solvers.blocks`): the units a placement moves, after
  ``makeBlocks`` of the authors' ``latency-greedy/greedy.cpp``
  (msr-fiddle/dnn-partitioning): the co-location classes
  (nodes without one are their own class), merged where two classes reach each other
  (such classes must share a machine, or the contracted graph would have a cycle),
  in a topological order of the contracted graph.
* :func:`solve_latency_greedy`: the authors' greedy: walk the blocks in that order and
  fill one accelerator after another with as many consecutive blocks as its memory
  holds; a block too large for any accelerator, or one met when every accelerator is
  used, goes to the CPUs.
* :func:`segments`: a dynamic program over the blocks' order: it cuts the order into
  consecutive segments, each run on the CPUs or as one accelerator's call (at most one
  call per accelerator, within memory), minimising the sum of the segments' times: a
  call's inputs, compute and outputs, a CPU segment's longest path. That sum is the
  latency when every segment waits for the one before it (a chain of layers) and
  over-counts it otherwise.
* :func:`solve_latency_search`: a local search from the segments, the greedy, all-CPU
  and the greedy with each accelerator filled to a fraction of its memory: it moves one block at a
  time to the CPUs, to an accelerator holding a neighbouring block, or to an empty
  accelerator, keeping every move that lowers the simulator's latency and respects
  memory and the acyclic contraction, until no move helps or time is up.
"""
from __future__ import annotations

import time
from typing import Optional

import numpy as np

from envs.call_latency import cpu_devices, tensor_cost
from envs.simulator import Simulator
from hsdag_core.costgraph import CostGraph
from policies.solvers.blocks import Blocks, blocks
from policies.solvers.bounds import lower_bound
from policies.solvers.result import SolveResult, finish
from policies.solvers.split import best_split

__all__ = ["Blocks", "blocks", "solve_latency_greedy", "solve_latency_search", "latency_start"]


def _accelerators(graph: CostGraph) -> list[int]:
    return [d for d in range(graph.num_devices) if not cpu_devices(graph)[d]]


def _cpu(graph: CostGraph) -> Optional[int]:
    cpus = np.flatnonzero(cpu_devices(graph))
    return int(cpus[0]) if cpus.size else None


def _fill(graph: CostGraph, b: Blocks, share: float = 1.0) -> Optional[np.ndarray]:
    """The authors' greedy over blocks, each accelerator filled to ``share`` of its memory."""
    accs, cpu = _accelerators(graph), _cpu(graph)
    runs_on = np.isfinite(graph.compute_s)
    on = np.full(len(b.order), -1, dtype=np.int64)
    k, k_used, cur = 0, 0, None
    for blk in b.order:
        nodes = b.of == blk
        fits_acc = lambda d: runs_on[nodes, d].all() and b.mem[blk] <= graph.mem_capacity[d] * share
        if cur is not None and runs_on[nodes, cur].all() and \
                k_used + b.mem[blk] <= graph.mem_capacity[cur] * share:
            on[blk], k_used = cur, k_used + b.mem[blk]
            continue
        cur = None
        if k < len(accs) and fits_acc(accs[k]):
            cur, k_used = accs[k], b.mem[blk]
            k += 1
            on[blk] = cur
        elif cpu is not None and runs_on[nodes, cpu].all():
            on[blk] = cpu
        else:
            return None
    return on[b.of]


def _segment_costs(graph: CostGraph, b: Blocks, accs: list[int], cpu: Optional[int]
                   ) -> tuple[np.ndarray, np.ndarray]:
    """``[B+1, B+1]`` time of blocks ``i..j-1`` on the CPUs and as one call (``inf`` where
    not allowed)."""
    nb = len(b.order)
    cost = tensor_cost(graph)
    cap = min((graph.mem_capacity[d] for d in accs), default=0.0)
    comp = np.where(np.isfinite(graph.compute_s), graph.compute_s, np.inf)
    acc_w = np.bincount(b.of, weights=comp[:, accs[0]], minlength=nb) if accs else np.full(nb, np.inf)
    cpu_w = np.full(nb, np.inf)
    if cpu is not None:   # a block's own longest path on the CPUs
        fin = comp[:, cpu].copy()
        for u, v in sorted(zip(graph.edge_src.tolist(), graph.edge_dst.tolist()), key=lambda e: e[1]):
            if b.of[u] == b.of[v]:
                fin[v] = max(fin[v], fin[u] + comp[v, cpu])
        cpu_w = np.full(nb, 0.0)
        np.maximum.at(cpu_w, b.of, fin)
    preds: list[list[int]] = [[] for _ in range(nb)]
    for a, c in b.edges.tolist():
        preds[c].append(a)
    # tensors crossing blocks: producer block, consumer blocks
    prod: dict[int, int] = {}
    cons: dict[int, set[int]] = {}
    for u, v, t in zip(graph.edge_src.tolist(), graph.edge_dst.tolist(), graph.edge_tensor.tolist()):
        if b.of[u] != b.of[v]:
            prod[t] = int(b.of[u])
            cons.setdefault(t, set()).add(int(b.of[v]))
    made: list[list[int]] = [[] for _ in range(nb)]
    fed: list[list[int]] = [[] for _ in range(nb)]
    for t, a in prod.items():
        made[a].append(t)
        for c in cons[t]:
            fed[c].append(t)
    last = {t: max(cs) for t, cs in cons.items()}
    C_cpu = np.full((nb + 1, nb + 1), np.inf)
    C_acc = np.full((nb + 1, nb + 1), np.inf)
    for i in range(nb):
        seen: set[int] = set()
        c_in = c_made = mem = work = 0.0
        closes = np.zeros(nb + 1)
        closed = 0.0
        L: dict[int, float] = {}
        longest = 0.0
        for j in range(i + 1, nb + 1):
            k = j - 1
            if cpu is not None and np.isfinite(longest):
                L[k] = cpu_w[k] + max((L[a] for a in preds[k] if a >= i), default=0.0)
                longest = max(longest, L[k])
                C_cpu[i, j] = longest
            mem += b.mem[k]
            work += acc_w[k]
            if not accs or mem > cap or not np.isfinite(work):
                if cpu is None or not np.isfinite(longest):
                    break
                continue
            for t in fed[k]:
                if prod[t] < i and t not in seen:
                    seen.add(t)
                    c_in += cost[t]
            for t in made[k]:
                c_made += cost[t]
                closes[last[t]] += cost[t]
            closed += closes[k]
            C_acc[i, j] = c_in + work + (c_made - closed)
    return C_cpu, C_acc


def segments(graph: CostGraph, b: Optional[Blocks] = None) -> Optional[np.ndarray]:
    """The placement of the segments' dynamic program (module docstring), or None."""
    b = blocks(graph) if b is None else b
    accs, cpu = _accelerators(graph), _cpu(graph)
    C_cpu, C_acc = _segment_costs(graph, b, accs, cpu)
    on = best_split([C_cpu, C_acc], [[cpu] if cpu is not None else [], accs], [False, True])
    return None if on is None else on[b.of]


def solve_latency_greedy(graph: CostGraph, objective: str = "latency", *,
                         time_limit: Optional[float] = None) -> SolveResult:
    """The authors' greedy (module docstring)."""
    t0 = time.perf_counter()
    _check(objective)
    p = _fill(graph, blocks(graph))
    return finish(graph, objective, "latency-greedy", p, t0, bound=lower_bound(graph, objective),
                  status="" if p is not None else "a block runs on no device")


def _check(objective: str) -> None:
    if objective != "latency":
        raise ValueError(f"this method solves the latency objective, not {objective!r}")


def _value(sim: Simulator, p: np.ndarray) -> float:
    r = sim.evaluate(p, "latency")
    return r.value if r.feasible else np.inf


def _improve(graph: CostGraph, sim: Simulator, b: Blocks, on: np.ndarray, deadline: float) -> tuple[np.ndarray, float]:
    """Block moves of the module docstring from the block placement ``on`` until none helps."""
    accs, cpu = _accelerators(graph), _cpu(graph)
    nb = len(b.order)
    nbrs: list[set[int]] = [set() for _ in range(nb)]
    for a, c in b.edges.tolist():
        nbrs[a].add(c)
        nbrs[c].add(a)
    best = _value(sim, on[b.of])
    improved = True
    while improved and time.perf_counter() < deadline:
        improved = False
        for blk in range(nb):
            if time.perf_counter() >= deadline:
                break
            here = on[blk]
            targets = {on[x] for x in nbrs[blk]}
            if cpu is not None:
                targets.add(cpu)
            empty = [d for d in accs if not (on == d).any()]
            if empty:
                targets.add(empty[0])
            targets.discard(here)
            for d in sorted(targets):
                if cpu_devices(graph)[d] and cpu_devices(graph)[here]:
                    continue
                on[blk] = d
                v = _value(sim, on[b.of])
                if v < best - 1e-12:
                    best, here, improved = v, d, True
                else:
                    on[blk] = here
    return on, best


def latency_start(graph: CostGraph, time_limit: Optional[float] = 10.0) -> Optional[np.ndarray]:
    """The best placement of :func:`solve_latency_search` within ``time_limit``."""
    r = solve_latency_search(graph, "latency", time_limit=time_limit)
    return r.placement if r.feasible else None


def solve_latency_search(graph: CostGraph, objective: str = "latency", *,
                         time_limit: Optional[float] = 10.0) -> SolveResult:
    """The local search of the module docstring, within ``time_limit`` seconds."""
    t0 = time.perf_counter()
    _check(objective)
    deadline = t0 + (time_limit if time_limit is not None else np.inf)
    sim = Simulator(graph)
    b = blocks(graph)
    cpu = _cpu(graph)
    starts = [segments(graph, b), segments(graph, blocks(graph, late=True))] + \
        [_fill(graph, b, s) for s in (1.0, 0.9, 0.75, 0.5)]
    if cpu is not None and np.isfinite(graph.compute_s[:, cpu]).all():
        starts.append(np.full(graph.num_nodes, cpu, dtype=np.int64))
    best, best_v = None, np.inf
    for k, p in enumerate(starts):
        if p is None:
            continue
        on = np.array([p[np.argmax(b.of == blk)] for blk in b.order], dtype=np.int64)
        # each start gets an equal share of what is left
        left = max(deadline - time.perf_counter(), 0.0) / (len(starts) - k)
        on, v = _improve(graph, sim, b, on, time.perf_counter() + left)
        if v < best_v:
            best, best_v = on[b.of], v
    from policies.solvers.latency_bound import critical_path, path_bound

    paths = [] if best is None else [critical_path(graph, sim.calls.evaluate(best)[3])]
    return finish(graph, objective, "latency-search", best, t0,
                  bound=max(lower_bound(graph, objective), path_bound(graph, paths)),
                  status="" if best is not None else "no start runs on the devices")
